"""Trainer side of the memory-flatness test: N profiler windows through the real scheduler.

The real WindowScheduler and torch.profiler run on this (training) thread; the clock is
injected so every window is "cheap" and the budget never stretches the period, which lets
1,000 windows run in seconds. Window files are deleted as the sidecar would.
Prints one JSON line: {"windows": N, "rss": [[window_count, rss_bytes], ...]}.
"""

import json
import os
import sys
import tempfile

import psutil
import torch

from stepwatch.agent._options import AgentSettings
from stepwatch.core.settings import load
from stepwatch.agent._windows import WindowScheduler

target = int(sys.argv[1])
settings = load(AgentSettings, {"windows": "scheduled", "window_every_steps": 4, "window_warmup_steps": 0,
                "window_active_steps": 1, "overhead_budget": 0.5}, environ={})
now = [0.0]


def emit(record):
    if record["t"] == "window":
        os.remove(record["path"])


sched = WindowScheduler(emit, torch, settings, tempfile.mkdtemp(), clock=lambda: now[0],
                        wall=lambda: now[0])
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 32)
proc, samples, step = psutil.Process(), [], 0
while sched.windows < target:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    now[0] += 1.0  # one "second" per step: a window's real cost is negligible against it
    before = sched.windows
    sched.on_boundary(step, 1.0, False)
    if sched.windows != before and sched.windows % 100 == 0:
        samples.append([sched.windows, proc.memory_info().rss])
print(json.dumps({"windows": sched.windows, "steps": step, "rss": samples}))
