"""Step-time overhead of the attached agent (step hook, CUDA events, memory_stats, sidecar).

Interleaved blocks in one process: agent off, agent on, off, on, ... Each block runs
``--block`` steps; the first ``--warmup`` steps of a block are not timed, then the timed part
is bracketed by two synchronizes (none inside). Overhead = median(on) / median(off) - 1, with
the spread of paired block differences. A real collector subprocess receives the telemetry.

    python bench/agent_overhead.py --blocks 10 --block 200 --out bench/results/agent_overhead.json
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
from torch import nn


def start_collector(tmp: str):
    ready = os.path.join(tmp, "ready.json")
    proc = subprocess.Popen([sys.executable, "-m", "stepwatch.collector.cli", "collector",
                             "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                             "--ready-file", ready], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(ready):
        time.sleep(0.05)
    with open(ready) as fh:
        return proc, json.load(fh)["grpc"]


def build(device, d_model: int, layers: int, batch: int, seq: int):
    layer = nn.TransformerEncoderLayer(d_model, 16, 4 * d_model, batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d_model, device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=10, help="blocks per arm")
    p.add_argument("--block", type=int, default=200, help="timed steps per block")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--out", default="")
    args = p.parse_args()
    from stepwatch import agent

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    tmp = tempfile.mkdtemp(prefix="stepwatch-bench-")
    collector, grpc_addr = start_collector(tmp)
    step = build(device, args.d_model, args.layers, args.batch, args.seq)
    block(step, device, 20, 10)  # global warm-up: kernels, allocator
    off, on = [], []
    try:
        for _ in range(args.blocks):
            off.append(block(step, device, args.block, args.warmup))
            agent.attach(collector=grpc_addr, job="bench", spool_dir=os.path.join(tmp, "spool"))
            on.append(block(step, device, args.block, args.warmup))
            agent.detach()
    finally:
        collector.terminate()
        collector.wait()
    diffs = sorted(b / a - 1 for a, b in zip(off, on))
    q = statistics.quantiles(diffs, n=4) if len(diffs) >= 4 else [diffs[0], 0, diffs[-1]]
    result = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "python": platform.python_version(),
        "command": " ".join(sys.argv), "blocks_per_arm": args.blocks, "steps_per_block": args.block,
        "median_step_ms_off": 1000 * statistics.median(off), "median_step_ms_on": 1000 * statistics.median(on),
        "overhead_median_pct": 100 * (statistics.median(on) / statistics.median(off) - 1),
        "paired_overhead_pct_median": 100 * statistics.median(diffs),
        "paired_overhead_pct_iqr": [100 * q[0], 100 * q[2]],
        "block_ms_off": [1000 * v for v in off], "block_ms_on": [1000 * v for v in on],
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    print(f"\n{'arm':<6}{'median step ms':>16}\n{'off':<6}{result['median_step_ms_off']:>16.3f}\n"
          f"{'on':<6}{result['median_step_ms_on']:>16.3f}\noverhead {result['paired_overhead_pct_median']:+.3f}% "
          f"(paired IQR {result['paired_overhead_pct_iqr'][0]:+.3f}..{result['paired_overhead_pct_iqr'][1]:+.3f}%)")


if __name__ == "__main__":
    main()
