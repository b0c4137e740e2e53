"""Step-time overhead of the attached agent, with and without profiler windows.

Interleaved blocks in one process, one arm after the other in every round:
  off       no agent
  base      agent attached, windows off (step hook, CUDA events, memory_stats, sidecar)
  base_nogpm  the same without the NVML GPM counters (--arms off,base,base_nogpm compares them)
  windows   agent with an aggressive schedule (a window every --every steps, budget 50%)
Each block runs ``--block`` steps; the first ``--warmup`` steps of a block are not timed, the
timed part is bracketed by two synchronizes (none inside). Overhead of an arm = median over
rounds of (arm block / off block of the same round) - 1, with the interquartile range.
The cost of one window follows from the windows arm; the overhead at the default schedule
(one window per ``window_interval_s`` = 60 s) is projected as base + cost / 60 s, and the
agent's own measurement (``overhead_ratio``, per-window cost) is reported beside it.
A real collector subprocess receives the telemetry.

    python bench/agent_overhead.py --blocks 8 --block 256 --out bench/results/agent_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from stepwatch.collector.tools.train import transformer_step


def start_collector(tmp: str):
    ready = os.path.join(tmp, "ready.json")
    proc = subprocess.Popen([sys.executable, "-m", "stepwatch.collector.tools", "collector",
                             "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                             "--ready-file", ready], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(ready):
        time.sleep(0.05)
    with open(ready) as fh:
        return proc, json.load(fh)["grpc"]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def block(step, device, n: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync(device)
    return (time.perf_counter() - t0) / n


def quartiles(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else [values[0], 0, values[-1]]
    return statistics.median(values), q[0], q[2]


ARMS = {
    "off": None,
    "base": {"windows": False},
    "base_nogpm": {"windows": False, "nvml_gpm": False},  # the base arm without GPM counters
    "windows": {"windows": "scheduled", "overhead_budget": 0.5},  # window_every_steps is set from --every
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=10, help="blocks per arm")
    p.add_argument("--block", type=int, default=200, help="timed steps per block")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--every", type=int, default=128, help="window period of the windows arm")
    p.add_argument("--settle-s", type=float, default=3.0,
                   help="wait after attach so the sidecar's start-up (imports, nvmlInit, connect) "
                        "is over: a job pays it once, not every block")
    p.add_argument("--activities", default="cpu,cuda")
    p.add_argument("--arms", default="off,base,windows", help="comma-separated subset of off,base,base_nogpm,windows")
    p.add_argument("--out", default="")
    args = p.parse_args()
    from stepwatch import agent

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    tmp = tempfile.mkdtemp(prefix="stepwatch-bench-")
    collector, grpc_addr = start_collector(tmp)
    step, _, _ = transformer_step(device, args.d_model, args.layers, args.batch, args.seq)
    block(step, device, 20, 10)  # global warm-up: kernels, allocator
    ARMS["windows"].update(window_every_steps=args.every, window_activities=args.activities)
    arms = {arm: ARMS[arm] for arm in args.arms.split(",")}
    times = {arm: [] for arm in arms}
    agent_cost, opened = [], []
    try:
        for _ in range(args.blocks):
            for arm, options in arms.items():
                if options is not None:
                    handle = agent.attach(collector=grpc_addr, job="bench",
                                          spool_dir=os.path.join(tmp, "spool"), **options)
                    time.sleep(args.settle_s)
                times[arm].append(block(step, device, args.block, args.warmup))
                if options is not None:
                    if arm == "windows":
                        opened.append(handle.windows._next_id - 1)  # windows opened in the block
                        if handle.windows.windows:
                            agent_cost.append(handle.windows.total_cost_s / handle.windows.windows)
                    agent.detach()
    finally:
        collector.terminate()
        collector.wait()
    off = times["off"]
    rel = {arm: [b / a - 1 for a, b in zip(off, times[arm])] for arm in ("base", "base_nogpm", "windows")
           if arm in times}
    step_s = statistics.median(off)
    # Per round: extra time of the windows block over the base block, per window opened.
    per_window = [(w - b) * args.block / n
                  for w, b, n in zip(times.get("windows", []), times.get("base", []), opened) if n]
    cost_per_window = statistics.median(per_window) if per_window else float("nan")
    result = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "python": platform.python_version(),
        "command": " ".join(sys.argv), "rounds": args.blocks, "steps_per_block": args.block,
        "window_every_steps": args.every, "activities": args.activities,
        "windows_opened_per_block": opened,
        "median_step_ms_off": 1000 * step_s,
        "overhead_pct": {arm: [100 * v for v in quartiles(rel[arm])] for arm in rel},
        "window_cost_ms_from_blocks": 1000 * cost_per_window,
        "window_cost_ms_agent_measured": 1000 * statistics.median(agent_cost) if agent_cost else None,
        "projected_default_overhead_pct": 100 * (statistics.median(rel["base"]) + cost_per_window / 60.0)
        if "base" in rel and per_window else None,
        "block_ms": {arm: [1000 * v for v in vals] for arm, vals in times.items()},
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    print(f"\nstep {1000 * step_s:.3f} ms (agent off), {args.blocks} rounds x {args.block} steps")
    for arm in rel:
        med, lo, hi = result["overhead_pct"][arm]
        print(f"{arm:<8} overhead {med:+.3f}%  (IQR {lo:+.3f} .. {hi:+.3f}%)")
    if per_window:
        print(f"one window ({args.activities}, every {args.every} steps): {cost_per_window * 1000:.1f} ms "
              f"from blocks, {result['window_cost_ms_agent_measured'] or float('nan'):.1f} ms measured by the agent")
        print(f"projected at defaults (1 window / 60 s): {result['projected_default_overhead_pct']:+.3f}%")


if __name__ == "__main__":
    main()
