"""Throughput-drift detection on simulated step-time series: delay against false alarms.

Each series is one rank's step times (base 1.0 s): lognormal per-step noise (``--noise``,
sigma of log time), a first step 300x longer (compilation), pauses of 50-200x with probability
``--pause-rate`` per step (checkpoints, evaluation) and a +-2% diurnal sine (period one day of
steps, random phase). A change starts at step ``--shift-at``: a step shift of 3, 5, 10 or 20%,
or a ramp to +10% over 2000 steps. Healthy series have no change.

Detectors, all fed the same series:
  stepwatch   the collector's DetectionEngine (default DetectionConfig), fed one step at a time
              exactly as live ingest feeds it; an alarm is any StepwatchThroughputDrift condition.
  fixed7      10-step block median > 1.07 x median of the trailing 100 block medians.
  z3          block median > mean + 3 sd of the trailing 100 block medians.
  mad3        block median > median + 3 x 1.4826 x MAD of the trailing 100 block medians
              (the median+3*MAD rule of Google's goodput monitoring).
The baselines' trailing window ends at the block before the judged one (no lag).

Reported per detector and change: detection delay in steps after the change starts (median,
p90) of the series that alarmed within ``--post`` steps, the share detected, and false alarms
per 10^5 healthy steps (alarm episodes, i.e. rising edges, counted on the healthy series and on
the pre-change part of every changed series).

    python bench/detection.py --out bench/results/detection.json --md bench/results/detection.md
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import subprocess
import sys
import time

import numpy as np

from stepwatch.collector.detect import DetectionConfig, DetectionEngine, parse_detection

CHANGES = {"shift 3%": ("step", 0.03), "shift 5%": ("step", 0.05), "shift 10%": ("step", 0.10),
           "shift 20%": ("step", 0.20), "ramp +10% over 2000 steps": ("ramp", 0.10)}
DETECTORS = ("stepwatch", "fixed7", "z3", "mad3")
BLOCK, TRAIL = 10, 100
DAY_STEPS = 86400


def series(rng: np.random.Generator, n: int, noise: float, pause_rate: float, change, at: int) -> np.ndarray:
    """Step times in seconds for steps 1..n (index 0 is step 1)."""
    s = np.arange(1, n + 1)
    level = 1.0 + 0.02 * np.sin(2 * np.pi * s / DAY_STEPS + rng.uniform(0, 2 * np.pi))
    if change is not None:
        kind, size = change
        since = s - at
        if kind == "step":
            level = level * np.where(since >= 0, 1 + size, 1.0)
        else:
            level = level * (1 + size * np.clip(since / 2000, 0, 1) * (since >= 0))
    t = level * np.exp(rng.normal(0, noise, n))
    pauses = rng.random(n) < pause_rate
    t[pauses] *= rng.uniform(50, 200, pauses.sum())
    t[0] *= 300
    return t


def edges(active: np.ndarray) -> np.ndarray:
    """Indices where an alarm starts (False -> True)."""
    a = active.astype(np.int8)
    return np.flatnonzero(np.diff(np.concatenate(([0], a))) == 1)


def run_stepwatch(t: np.ndarray, cfg: DetectionConfig) -> np.ndarray:
    """Per step: is a StepwatchThroughputDrift condition active after feeding that step."""
    engine, out = DetectionEngine(cfg), np.zeros(len(t), bool)
    clock = 1.7e9 + np.cumsum(t)
    for i, (dt, end) in enumerate(zip(t.tolist(), clock.tolist())):
        engine.step("bench", 0, i + 1, end, dt)
        out[i] = bool(engine.conditions())
    return out


def run_baseline(t: np.ndarray, rule: str) -> np.ndarray:
    """Per step (held over each block): does the rule flag the block that ended at or before it."""
    nb = len(t) // BLOCK
    blocks = np.median(t[: nb * BLOCK].reshape(nb, BLOCK), axis=1)
    if nb <= TRAIL:
        return np.zeros(len(t), bool)
    win = np.lib.stride_tricks.sliding_window_view(blocks[:-1], TRAIL)  # win[k] precedes blocks[k + TRAIL]
    cur = blocks[TRAIL:]
    if rule == "fixed7":
        flag = cur > 1.07 * np.median(win, axis=1)
    elif rule == "z3":
        flag = cur > win.mean(axis=1) + 3 * win.std(axis=1)
    else:
        med = np.median(win, axis=1)
        flag = cur > med + 3 * 1.4826 * np.median(np.abs(win - med[:, None]), axis=1)
    per_block = np.concatenate((np.zeros(TRAIL, bool), flag))
    known = (np.arange(len(t)) + 1) // BLOCK - 1  # the newest block complete at each step
    return (known >= 0) & per_block[np.clip(known, 0, nb - 1)]


def judge(t: np.ndarray, cfg: DetectionConfig) -> dict:
    return {d: run_stepwatch(t, cfg) if d == "stepwatch" else run_baseline(t, d) for d in DETECTORS}


def task(job: tuple) -> dict:
    """One series: ('healthy', seed, n, noise, args) or (change name, ...). Runs in a worker process."""
    name, seed, n, noise, a = job
    rng = np.random.default_rng(seed)
    cfg = parse_detection(a["detection"])
    change = CHANGES.get(name)
    at = a["shift_at"]
    t = series(rng, n, noise, a["pause_rate"], change, at)
    out = {"name": name, "noise": noise}
    for d, active in judge(t, cfg).items():
        e = edges(active)
        if change is None:
            out[d] = {"false": len(e), "healthy_steps": n}
        else:
            pre = e[e < at - 1]  # index at-1 is the first changed step
            hit = np.flatnonzero(active[at - 1:])
            out[d] = {"false": len(pre), "healthy_steps": at - 1,
                      "delay": int(hit[0]) if len(hit) else None}
    return out


def summarize(results: list[dict]) -> dict:
    table = {}
    for d in DETECTORS:
        false = sum(r[d]["false"] for r in results)
        healthy = sum(r[d]["healthy_steps"] for r in results)
        row = {"false_alarms_per_1e5_steps": round(1e5 * false / healthy, 2), "false_alarms": false,
               "healthy_steps": healthy}
        for name in CHANGES:
            delays = [r[d]["delay"] for r in results if r["name"] == name]
            got = sorted(x for x in delays if x is not None)
            row[name] = {"detected": f"{len(got)}/{len(delays)}",
                         "delay_median": float(np.median(got)) if got else None,
                         "delay_p90": float(np.percentile(got, 90)) if got else None}
        table[d] = row
    return table


def environment() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = ""
    from importlib.metadata import version
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "stepwatch": version("stepwatch"), "git_commit": commit, "platform": platform.platform()}


def table_md(table: dict) -> str:
    lines = ["| detector | false alarms / 10^5 healthy steps | " + " | ".join(CHANGES) + " |",
             "|---|---:|" + "---:|" * len(CHANGES)]
    for d in DETECTORS:
        row, cells = table[d], []
        for name in CHANGES:
            c = row[name]
            cells.append("— ({})".format(c["detected"]) if c["delay_median"] is None else
                         f"{c['delay_median']:.0f} / {c['delay_p90']:.0f} ({c['detected']})")
        lines.append(f"| {d} | {row['false_alarms_per_1e5_steps']:.2f} ({row['false_alarms']}) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


ANALYSIS = "## Analysis"


def markdown(doc: dict, previous: str = "") -> str:
    """The measurement part, then the hand-written ``## Analysis`` section of ``previous`` if any."""
    a, env = doc["parameters"], doc["environment"]
    out = ["# Throughput-drift detection: delay vs false alarms", "",
           f"Generated by `{doc['command']}` on {doc['date']} in {doc['wall_s']} s.", "",
           f"- Device: {env['cpu']}, {env['cpus']} CPU(s); {env['platform']}",
           f"- Versions: Python {env['python']}, numpy {env['numpy']}, stepwatch {env['stepwatch']} "
           f"(git {env['git_commit'] or '?'})",
           f"- Series: base step 1.0 s, first step x300, pauses x50-200 with probability {a['pause_rate']} per "
           f"step, +-2% diurnal sine; change at step {a['shift_at']}, {a['post']} steps simulated after it; "
           f"{a['trials']} series per change, {a['healthy']} healthy series of {a['healthy_steps']:,} steps.",
           f"- stepwatch drift settings: `{json.dumps(doc['stepwatch_config'])}`", "",
           "Cells: delay median / p90 in steps after the change starts (series detected within the window). "
           "False alarms: alarm episodes per 10^5 healthy steps (count in brackets).", ""]
    for noise, table in doc["results"].items():
        out += [f"### Noise sigma {noise}", "", table_md(table), ""]
    text = "\n".join(out)
    if ANALYSIS in previous:
        text += "\n" + previous[previous.index(ANALYSIS):]
    return text


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=80, help="series per change and noise level")
    p.add_argument("--healthy", type=int, default=4, help="healthy series of --healthy-steps steps per noise level")
    p.add_argument("--healthy-steps", type=int, default=100_000)
    p.add_argument("--shift-at", type=int, default=4000)
    p.add_argument("--post", type=int, default=4000, help="steps simulated after the change starts")
    p.add_argument("--noise", type=float, nargs="+", default=[0.03, 0.06],
                   help="sigma of the lognormal per-step noise; one table per value")
    p.add_argument("--pause-rate", type=float, default=0.002, help="probability of a 50-200x pause per step")
    p.add_argument("--detection", default="", help="stepwatch detection settings (YAML), default: defaults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", help="write the JSON document here")
    p.add_argument("--md", help="write the markdown report here (keeps its '## Analysis' section)")
    args = p.parse_args(argv)
    a = {k: getattr(args, k) for k in ("trials", "healthy", "healthy_steps", "shift_at", "post", "noise",
                                       "pause_rate", "detection", "seed")}
    n, jobs = args.shift_at + args.post, []
    for j, noise in enumerate(args.noise):
        seed = args.seed * 1_000_003 + j * 100_000
        jobs += [("healthy", seed + i, args.healthy_steps, noise, a) for i in range(args.healthy)]
        jobs += [(name, seed + 1000 * (k + 1) + i, n, noise, a) for k, name in enumerate(CHANGES)
                 for i in range(args.trials)]
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        results = pool.map(task, jobs, chunksize=4)
    argv_used = sys.argv[1:] if argv is None else list(argv)
    doc = {"command": " ".join(["python", "bench/detection.py", *argv_used]),
           "environment": environment(), "date": time.strftime("%Y-%m-%d"),
           "wall_s": round(time.perf_counter() - t0, 1), "parameters": a,
           "stepwatch_config": dict(parse_detection(args.detection).drift.__dict__),
           "results": {str(noise): summarize([r for r in results if r["noise"] == noise]) for noise in args.noise}}
    previous = ""
    if args.md and os.path.exists(args.md):
        with open(args.md, encoding="utf-8") as fh:
            previous = fh.read()
    md = markdown(doc, previous)
    print(md)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
    if args.md:
        with open(args.md, "w", encoding="utf-8") as fh:
            fh.write(md)


if __name__ == "__main__":
    main()
