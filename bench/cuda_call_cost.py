"""What one CUDA event call costs the calling Python thread, alone and beside a training loop's
other threads: the calls the phase times make (``Event.record``, ``torch.cuda.current_stream``,
``Event.query``, ``Event.elapsed_time``).

    python bench/cuda_call_cost.py --out bench/results/cuda_call_cost_<card>.json

Arms, each timed call by call with perf_counter (median and 90th percentile, microseconds):
``idle`` (nothing else running), ``queued`` (the GPU busy with a long queue of matrix products
launched just before), ``pinning`` (a DataLoader with two workers and pin_memory iterated by
another thread, as in a training job).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import torch


def _time(fn, n: int) -> dict:
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    xs.sort()
    return {"median_us": statistics.median(xs) * 1e6, "p90_us": xs[int(0.9 * (n - 1))] * 1e6}


def _calls(n: int) -> dict:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    b.record()
    b.synchronize()
    stream = torch.cuda.current_stream()
    return {"record": _time(a.record, n), "record_on_stream": _time(lambda: a.record(stream), n),
            "current_stream": _time(torch.cuda.current_stream, n), "query": _time(b.query, n),
            "elapsed_time": _time(lambda: (b.synchronize(), a.elapsed_time(b)) and None, n)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--out", default="")
    a = p.parse_args()
    torch.zeros(1, device="cuda")
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    out["idle"] = _calls(a.n)
    m = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(400):  # a long queue
        m @ m
    out["queued"] = _calls(a.n)
    torch.cuda.synchronize()
    data = torch.utils.data.DataLoader(torch.randn(1 << 16, 256), batch_size=64, num_workers=2, pin_memory=True)
    stop = threading.Event()

    def consume():
        while not stop.is_set():
            for _ in data:
                if stop.is_set():
                    break

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(2)
    out["pinning"] = _calls(a.n)
    stop.set()
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
