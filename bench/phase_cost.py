"""What the always-on phase times cost the training thread, part by part, on a real GPU job.

    python bench/phase_cost.py --size m --steps 600 --out bench/results/phase_cost_<card>.json

The job of bench/real_job.py (GPT-style bf16 transformer, DataLoader with workers, AdamW,
``loss.item()`` every step) runs with a StepTracker and a PhaseTimer that samples every step
(budget 1.0), no sidecar (records go to a list). Each part the timer runs on the training or
autograd thread is timed with perf_counter: arming at the boundary (hook registration), each
point (event record), closing (hook removal), reading and emitting the record at a later
boundary. Printed and written: per part, the median and the 90th percentile in microseconds and
how often it ran; the share of points slower than 20 us (a record that waited on a full launch
queue); the step time with and without sampling (alternated blocks of 50 steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, "bench")
import real_job  # noqa: E402

from stepwatch.agent import _phase_times, _steps  # noqa: E402
from stepwatch.agent._dataloader import DataLoaderTimer  # noqa: E402


class Timed:
    """Wraps a method and keeps how long each call took."""

    def __init__(self, obj, name: str, took: dict):
        self.fn, self.name, self.took = getattr(obj, name), name, took
        setattr(obj, name, self)

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.took.setdefault(self.name, []).append(time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="m", choices=list(real_job.SIZES))
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--out", default="")
    a = p.parse_args()
    cuda = torch.cuda.is_available()  # (CPU: a smoke test of the script only)
    device = torch.device("cuda" if cuda else "cpu")
    d, layers, heads, seq, vocab, batch, _ = real_job.SIZES[a.size]
    model = real_job.GPT(d, layers, heads, seq, vocab).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = torch.utils.data.DataLoader(real_job.Tokens(seq, vocab), batch_size=batch * 4, num_workers=2,
                                         pin_memory=cuda, persistent_workers=True)
    took: dict = {}
    out: list = []
    dl = DataLoaderTimer()
    dl.install()
    timer = _phase_times.PhaseTimer(dl, 1.0)
    for name in ("arm", "close", "_mark"):
        Timed(timer, name, took)
    tracker = _steps.StepTracker(out.append, dl, torch.cuda if cuda else None, phases=timer)
    Timed(tracker, "_emit_cuda_phases", took)
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(lambda o, *_: tracker.on_optimizer_step(o))
    ends, sampled_blocks = [], []
    it = iter(loader)
    for i in range(a.steps):
        on = (i // 50) % 2 == 0  # alternated blocks: sampling on / off
        timer._budget = 1.0 if on else 0.0
        tokens = next(it).to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = loss_fn(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        ends.append(time.perf_counter())
        sampled_blocks.append(on)
    steps = [(b - e, on) for e, b, on in zip(ends, ends[1:], sampled_blocks[1:])][100:]
    result = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__, "size": a.size,
              "batch": batch * 4, "command": " ".join(sys.argv), "parts": {}}
    for name, xs in took.items():
        xs = sorted(xs)
        result["parts"][name] = {"calls": len(xs), "median_us": statistics.median(xs) * 1e6,
                                 "p90_us": xs[int(0.9 * (len(xs) - 1))] * 1e6,
                                 "over_20us": sum(x > 20e-6 for x in xs) / len(xs)}
    on = [s for s, o in steps if o]
    off = [s for s, o in steps if not o]
    result["step_ms_sampling"] = statistics.median(on) * 1e3
    result["step_ms_not_sampling"] = statistics.median(off) * 1e3
    result["timer_cost_per_sample_us"] = timer.cost_s / max(1, timer.sampled) * 1e6
    print(json.dumps(result, indent=1))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
