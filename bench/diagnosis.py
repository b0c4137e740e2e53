"""Diagnosis backtest: real training jobs slowed by a known cause from some step on; does the
drift alert's diagnosis name that cause first, and how long after the change is it raised?

A real collector (subprocess) and real training jobs (`python -m stepwatch.collector.tools.train`,
profiler windows every 32 steps) with one injected cause each (`--cause`, see train.py): extra
matrix products in backward or forward, a sleep in the data loader, inside Optimizer.step or
in the loop before it, launch-bound tiny operators, a busy Python thread beside training, the
for-loop optimizer. Each cause at two sizes (``--cause-ms``). The expected first contributor of
each cause is in EXPECTED. Runs on CPU (default) or CUDA (``--device cuda``).

    python bench/diagnosis.py --out bench/results/diagnosis_cpu.json --md bench/results/diagnosis_cpu.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

# the phase times' names (with the agent's default phase budget), then the windows' names
# (without enough sampled steps on both sides of the onset: the CPU jobs here)
EXPECTED = {"backward": ("backward",), "forward": ("forward",), "dataloader": ("data", "data-loader wait"),
            "optimizer": ("optimizer",), "loop_sleep": ("sync", "other"), "small_ops": ("forward",),
            "cpu_thread": ("host CPU",), "slow_optimizer": ("optimizer",)}
DETECTION = {"warmup_steps": 10, "resolve_hold_s": 600, "trace_steps": 0,
             # horizons of seconds for these short jobs (the defaults are minutes)
             "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 6,
                       "critical_window_s": 2, "warning_window_s": 3, "info_window_s": 6,
                       "clear_s": 1, "z": 3}}
SMALL = ["--step-sleep-s", "0.04", "--d-model", "32", "--layers", "1", "--batch", "4", "--seq", "16"]


def start_collector(tmp: str) -> tuple[subprocess.Popen, dict]:
    cfg, ready = os.path.join(tmp, "collector.yml"), os.path.join(tmp, "ready.json")
    with open(cfg, "w") as fh:
        yaml.safe_dump({"detection": DETECTION}, fh)
    proc = subprocess.Popen([sys.executable, "-m", "stepwatch.collector.tools", "collector", "--config", cfg,
                             "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                             "--ready-file", ready], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise SystemExit("collector did not start")
        time.sleep(0.1)
    with open(ready) as fh:
        return proc, json.load(fh)


def trainer(addr: str, tmp: str, job: str, cause: str, ms: float, a) -> subprocess.Popen:
    env = dict(os.environ, STEPWATCH_COLLECTOR=addr, STEPWATCH_JOB=job, STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS="32",
               STEPWATCH_OVERHEAD_BUDGET="0.5", STEPWATCH_SPOOL_DIR=os.path.join(tmp, "spool"),
               STEPWATCH_FLUSH_INTERVAL_S="0.2", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "stepwatch.collector.tools.train", "--steps", str(a.steps), "--device", a.device,
           "--cause", cause, "--cause-from-step", str(a.at), "--cause-ms", str(ms), *a.model]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def alerts(http: str) -> list:
    with urllib.request.urlopen(f"http://{http}/api/alerts", timeout=10) as resp:
        return json.loads(resp.read())["alerts"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--causes", nargs="+", default=list(EXPECTED), choices=list(EXPECTED))
    p.add_argument("--ms", type=float, nargs="+", default=[4.0, 12.0], help="cause sizes, ms per step")
    p.add_argument("--steps", type=int, help="default 700 on CPU, 1,200 on CUDA (the drift "
                   "detector is armed after 8 s of steps here)")
    p.add_argument("--at", type=int, default=400)
    p.add_argument("--device", default="cpu")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--out")
    p.add_argument("--md")
    a = p.parse_args(argv)
    a.steps = a.steps or (700 if a.device == "cpu" else 1200)
    a.model = SMALL if a.device == "cpu" else ["--d-model", "512", "--layers", "4", "--batch", "16", "--seq", "256"]
    tmp = tempfile.mkdtemp(prefix="stepwatch-diagnosis-")
    col, ready = start_collector(tmp)
    started = time.perf_counter()
    runs = [(c, ms if c != "slow_optimizer" else 0.0) for c in a.causes for ms in a.ms]
    runs = list(dict.fromkeys(runs))  # slow_optimizer has one size
    try:
        for i in range(0, len(runs), a.parallel):
            batch = {f"{c}-{ms:g}": trainer(ready["grpc"], tmp, f"{c}-{ms:g}", c, ms, a) for c, ms in runs[i:i + a.parallel]}
            for job, proc in batch.items():
                _, err = proc.communicate(timeout=900)
                if proc.returncode:
                    raise SystemExit(f"{job}: {err[-2000:]}")
        time.sleep(2)
        got = alerts(ready["http"])
    finally:
        col.terminate()
        col.wait(10)
    rows = []
    for cause, ms in runs:
        job = f"{cause}-{ms:g}"
        drift = [x for x in got if x["job"] == job and x["alertname"] == "StepwatchThroughputDrift"]
        first = drift[0]["diagnosis"].split(" +")[0].split(" -")[0] if drift and drift[0]["diagnosis"] else None
        if first and first.startswith("no measured contributor"):
            first = "unexplained"
        rows.append({"cause": cause, "ms": ms, "expected": " or ".join(EXPECTED[cause]), "raised": bool(drift),
                     "ratio": drift[0]["ratio"] if drift else None,
                     "delay_steps": drift[0]["raised_step"] - a.at if drift and drift[0]["raised_step"] else None,
                     "onset_error": drift[0]["step"] - a.at if drift else None,
                     "first": first, "right": first in EXPECTED[cause],
                     "diagnosis": drift[0]["diagnosis"] if drift else ""})
    doc = {"command": " ".join(["python", "bench/diagnosis.py", *(sys.argv[1:] if argv is None else argv)]),
           "date": time.strftime("%Y-%m-%d"), "wall_s": round(time.perf_counter() - started, 1),
           "device": a.device, "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
           "rows": rows, "right": sum(r["right"] for r in rows), "total": len(rows)}
    lines = [f"# Diagnosis backtest ({a.device})", "",
             f"Generated by `{doc['command']}` on {doc['date']} in {doc['wall_s']} s; Python {doc['python']}.",
             f"Jobs of {a.steps} steps, cause from step {a.at}, profiler windows every 32 steps.", "",
             f"**Top contributor right: {doc['right']} of {doc['total']}.**", "",
             "| cause | ms/step | raised (ratio) | delay / onset error, steps | expected first | diagnosis |",
             "|---|---:|---|---|---|---|"]
    for r in rows:
        raised = f"yes ({r['ratio']:.3f})" if r["raised"] else "no"
        timing = f"{r['delay_steps']} / {r['onset_error']:+d}" if r["raised"] else "—"
        mark = "✓" if r["right"] else "✗"
        lines.append(f"| {r['cause']} | {r['ms']:g} | {raised} | {timing} | {mark} {r['expected']} | {r['diagnosis']} |")
    md = "\n".join(lines) + "\n"
    print(md)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(doc, fh, indent=1)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md)


if __name__ == "__main__":
    main()
