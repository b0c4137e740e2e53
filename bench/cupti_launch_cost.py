"""Does a profiler session leave CUDA kernel launches slower for the rest of the process?

    python bench/cupti_launch_cost.py            # on a GPU machine; one process per arm
    python bench/cupti_launch_cost.py --cpu      # the same for CPU operators (arms none and cpu)

Each arm is a fresh process: it times the host cost of launching tiny kernels (``x.add_(1)``
on one element, 20,000 launches a block, the device faster than the launches so the host never
waits) in blocks before any profiler session, then runs one torch.profiler session as the
agent's windows do (CPU+CUDA activity or CPU only, 4 steps, exported to a file), then times
blocks again, runs a second session, and times again. Arms: no session (the drift of the
process itself), cpu+cuda with ``TEARDOWN_CUPTI=1`` (what the agent sets), cpu+cuda with
``TEARDOWN_CUPTI=0``, cpu only. Prints one JSON line per arm: launch microseconds per block.
A lasting change left by a session shows as the blocks after it staying above the blocks
before it, beyond what the no-session arm drifts by. ``--cpu`` times the dispatch of tiny CPU
operators instead (no CUDA), arms none, a cpu session, an empty session (started and stopped
with no operator inside) and only ``_prepare_profiler`` (Kineto's set-up before a trace): a
lasting cost on PyTorch's or Kineto's side, which a launch-bound GPU job would pay per operator
as well. ``--repeat N`` runs every arm N times (fresh processes, arms alternated) and prints
each arm's mean change after one and after two sessions.
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
        "cpu": ("cpu", "1"), "cpu_empty": ("empty", "1"), "cpu_prepare": ("prepare", "1")}
CPU_ARMS = ("none", "cpu", "cpu_empty", "cpu_prepare")
GPU_ARMS = ("none", "cuda_teardown1", "cuda_teardown0", "cpu")


def child(activities: str, device: str) -> dict:
    import torch

    x = torch.zeros(1, device=device)
    n = 20000
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def block() -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        dt = time.perf_counter() - t0
        sync()
        return 1e6 * dt / n

    def blocks(k: int = 7) -> list:
        return [round(block(), 3) for _ in range(k)]

    def session(path: str) -> None:
        if activities == "empty":  # a session started and stopped with no operator inside
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.start()
            prof.stop()
            return
        if activities == "prepare":  # only what the profiler does before a trace (Kineto's set-up)
            from torch.autograd import ProfilerConfig, ProfilerState, _prepare_profiler
            cfg = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False,
                                 torch._C._profiler._ExperimentalConfig())
            _prepare_profiler(cfg, {torch.profiler.ProfilerActivity.CPU})
            return
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
        print(json.dumps(child(sys.argv[2], sys.argv[3])))
        return
    import torch
    cpu = "--cpu" in sys.argv
    device = "cpu" if cpu else "cuda"
    print(json.dumps({"device": "cpu" if cpu else torch.cuda.get_device_name(0), "torch": torch.__version__}))
    arms = {k: ARMS[k] for k in (CPU_ARMS if cpu else GPU_ARMS)}
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    changes: dict = {}
    for _ in range(repeat):
        for name, (acts, teardown) in arms.items():
            env = dict(os.environ, TEARDOWN_CUPTI=teardown)
            res = subprocess.run([sys.executable, __file__, "--child", acts, device], env=env,
                                 capture_output=True, text=True, timeout=300)
            line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-500:]
            result = json.loads(line) if line.startswith("{") else line
            print(json.dumps({"arm": name, "result": result}))
            if isinstance(result, dict):
                m = result["median_us"]
                changes.setdefault(name, []).append((m["after1"] / m["before"] - 1, m["after2"] / m["before"] - 1))
    for name, v in changes.items():
        a1, a2 = [100 * x for x, _ in v], [100 * y for _, y in v]
        spread = lambda xs: statistics.stdev(xs) if len(xs) > 1 else float("nan")
        print(json.dumps({"arm": name, "runs": len(v), "after1_pct": round(statistics.mean(a1), 2),
                          "after1_sd": round(spread(a1), 2), "after2_pct": round(statistics.mean(a2), 2),
                          "after2_sd": round(spread(a2), 2)}))


if __name__ == "__main__":
    main()
