"""The collector's memory per rank as its state fills: recorded agent batches (as
bench/ingest_path.py builds them, 20 steps every 5 s, GPU, host and allocator samples at the
agent's 1 Hz, a window every minute) applied in process to N ranks; resident memory over the
start after 90 s, 5 min, 15 min, 2,000 s, 5,000 s and ``--batches`` x 5 s of data. The diagnosis
evidence keeps 15 min of samples and 6,000 steps of blocks (1,500 s of these batches), the drift
detector up to 2,000 blocks (5,000 s): short benchmark runs see a fraction of the steady state.

    python bench/collector_memory.py --ranks 1000 --batches 200
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_scale import templates  # noqa: E402
from ingest_path import connected_pipeline, recorded_batch  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1000)
    p.add_argument("--batches", type=int, default=200, help="batches per rank (5 s of data each)")
    p.add_argument("--samples-per-batch", type=int, default=5, help="GPU, host and allocator samples of each kind")
    args = p.parse_args()

    from stepwatch.proto.stepwatch.v1 import agent_pb2

    parts = templates()
    start = rss_bytes()
    pipe, hellos = connected_pipeline(args.ranks)
    rows, n = [], args.samples_per_batch
    for seq in range(1, args.batches + 1):
        b = recorded_batch(parts, seq, n)
        data = b.SerializeToString()
        for key, h in hellos:
            pipe.batch(key, h, agent_pb2.Batch.FromString(data), 1.7e9 + seq * 5)
        if seq in (18, 60, 180, 400, 1000) or seq == args.batches:
            gc.collect()
            grown = rss_bytes() - start
            rows.append({"data_s": seq * 5, "rss_mb": round(grown / 1e6, 1), "kb_per_rank": round(grown / 1e3 / args.ranks, 1)})
            print(f"{seq * 5:>5} s of data: {grown / 1e6:.0f} MB over the start, "
                  f"{grown / 1e3 / args.ranks:.0f} KB per rank", file=sys.stderr, flush=True)
    print(json.dumps({"command": "python bench/collector_memory.py " + " ".join(sys.argv[1:]),
                      "ranks": args.ranks, "samples_per_batch": n, "rows": rows, "python": platform.python_version(),
                      "machine": platform.platform(), "time": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
