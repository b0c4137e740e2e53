"""Does a profiler session leave CUDA kernel launches slower for the rest of the process?

    python bench/cupti_launch_cost.py            # on a GPU machine; one process per arm

Each arm is a fresh process: it times the host cost of launching tiny kernels (``x.add_(1)``
on one element, 20,000 launches a block, the device faster than the launches so the host never
waits) in blocks before any profiler session, then runs one torch.profiler session as the
agent's windows do (CPU+CUDA activity or CPU only, 4 steps, exported to a file), then times
blocks again, runs a second session, and times again. Arms: no session (the drift of the
process itself), cpu+cuda with ``TEARDOWN_CUPTI=1`` (what the agent sets), cpu+cuda with
``TEARDOWN_CUPTI=0``, cpu only. Prints one JSON line per arm: launch microseconds per block.
A lasting change left by a session shows as the blocks after it staying above the blocks
before it, beyond what the no-session arm drifts by.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ARMS = {"none": ("", "1"), "cuda_teardown1": ("cpu,cuda", "1"), "cuda_teardown0": ("cpu,cuda", "0"),
        "cpu": ("cpu", "1")}


def child(activities: str) -> dict:
    import torch

    x = torch.zeros(1, device="cuda")
    n = 20000

    def block() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        dt = time.perf_counter() - t0
        torch.cuda.synchronize()
        return 1e6 * dt / n

    def blocks(k: int = 7) -> list:
        return [round(block(), 3) for _ in range(k)]

    def session(path: str) -> None:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if "cuda" in activities:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts,
                                    schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
                                    on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
            for _ in range(4):
                for _ in range(200):
                    x.add_(1)
                prof.step()

    blocks(3)  # the first launches (module load, caches)
    out = {"before": blocks()}
    with tempfile.TemporaryDirectory() as tmp:
        for k in (1, 2):
            if activities:
                session(os.path.join(tmp, f"s{k}.json"))
            out[f"after{k}"] = blocks()
    out["median_us"] = {k: statistics.median(v) for k, v in out.items() if isinstance(v, list)}
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        return
    import torch
    print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__}))
    for name, (acts, teardown) in ARMS.items():
        env = dict(os.environ, TEARDOWN_CUPTI=teardown)
        res = subprocess.run([sys.executable, __file__, "--child", acts], env=env, capture_output=True,
                             text=True, timeout=300)
        line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-500:]
        print(json.dumps({"arm": name, "result": json.loads(line) if line.startswith("{") else line}))


if __name__ == "__main__":
    main()
