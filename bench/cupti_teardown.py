"""A/B of CUPTI teardown after profiler windows, on a GPU: the same one-minute job with the
agent (windows every ~10 s, cpu+cuda activities) with TEARDOWN_CUPTI=1 (the agent's default on
CUDA >= 12.6) and =0 (Kineto's default in torch 2.11). Reports steps done in the time, the
agent's window_aftereffect events (its own after-effect check), windows and overhead ratio.

    python bench/cupti_teardown.py --seconds 60 --out bench/results/cupti_teardown_h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from stepwatch.collector.ingest._record import read_record


def run(teardown: str, seconds: float) -> dict:
    tmp = tempfile.mkdtemp(prefix="stepwatch-cupti-")
    ready, rec = os.path.join(tmp, "ready.json"), os.path.join(tmp, "rec.jsonl")
    col = subprocess.Popen([sys.executable, "-m", "stepwatch.collector.tools", "collector", "--grpc-listen",
                            "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--ready-file", ready, "--record", rec,
                            "--detection", "{trace_steps: 0}"], stderr=subprocess.DEVNULL)
    while not os.path.exists(ready):
        time.sleep(0.1)
    with open(ready) as fh:
        addr = json.load(fh)["grpc"]
    env = dict(os.environ, STEPWATCH_COLLECTOR=addr, STEPWATCH_JOB="cupti", TEARDOWN_CUPTI=teardown,
               STEPWATCH_SPOOL_DIR=os.path.join(tmp, "spool"))
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu", "short_job.py")
    subprocess.run([sys.executable, job, str(seconds)], env=env, check=True, capture_output=True)
    time.sleep(3)
    col.terminate()
    col.wait()
    batches = [ev.batch for ev in read_record(open(rec)) if ev.kind == "batch"]
    steps = [s for b in batches for s in b.steps]
    events = [e.message for b in batches for e in b.events if e.kind == "window_aftereffect"]
    stats = [b.stats for b in batches if b.HasField("stats")][-1]
    plain = sorted(s.duration_s for s in steps if not s.profiled)
    return {"TEARDOWN_CUPTI": teardown, "steps": max(s.step for s in steps),
            "median_step_ms": 1e3 * plain[len(plain) // 2], "window_aftereffect": events,
            "windows": stats.windows, "overhead_ratio": stats.overhead_ratio,
            "window_warmup_s": stats.window_warmup_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--out")
    a = p.parse_args()
    import torch
    rows = [run(t, a.seconds) for t in ("0", "1")]
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows,
           "command": " ".join(["python", *sys.argv])}
    print(json.dumps(doc, indent=1))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
