"""Trainer for the memory-flatness test: many profiler windows, RSS sampled as they go.

Prints one JSON line: {"windows": N, "rss": [[window_count, rss_bytes], ...]}.
"""

import json
import sys

import psutil
import torch

from stepwatch import agent

target = int(sys.argv[1])
handle = agent.attach(job="rss", window_every_steps=4, window_warmup_steps=0,
                      window_active_steps=1, overhead_budget=0.99)
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 32)
proc, samples, step = psutil.Process(), [], 0
while handle.windows.windows < target:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    n = handle.windows.windows
    if step % 4 == 1 and (not samples or samples[-1][0] != n) and n % 50 == 0:
        samples.append([n, proc.memory_info().rss])
print(json.dumps({"windows": handle.windows.windows, "steps": step, "rss": samples,
                  "skips": handle.windows.skips, "hook_errors": handle.hook_errors}))
