"""The detection backtest: stepwatch's drift detection against rules used in practice, on
step-time series built like real training (collector/tools/synthetic.py: log-normal noise,
warm-up, evaluation pauses every 1,000 steps, checkpoint stalls every 2,000, GC spikes,
data-loader bursts, a slow +-1.5% wobble).

For each noise level and seed, every change (a step of +3, +5, +10, +20%, or a ramp to +10%
over 2,000 steps, starting at ``--at``) is simulated together with its healthy twin (same seed,
no change). Detectors, all fed the same series:
  stepwatch  the collector's DetectionEngine and AlertBook (default settings), one step at a
             time as live ingest feeds them; a raise is an episode firing.
  z3         10-step block median > mean + 3 sd of the trailing 100 block medians.
  mad3       block median > median + 3 x 1.4826 x MAD of the trailing 100 block medians.
  hud        two consecutive block medians >= 5% above the trailing median (PyTorch HUD).
  fixed7     block median > 1.07 x the trailing median (TorchBench's 7% threshold).

Reported per detector and change: the share of changes raised within ``--post`` steps, the
delay from the change to the first raise (median, p90), the onset error (stepwatch's reported
onset step minus the change; the baselines report no onset, so their raise is their onset),
episodes raised after the change (one is the aim), and false alarms per 10,000 healthy steps
(raises on the healthy twins and before every change).

    python bench/detection.py --out bench/results/detection.json --md bench/results/detection.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time

from stepwatch.collector.alerting import AlertBook
from stepwatch.collector.detect import DetectionEngine, parse_detection
from stepwatch.collector.tools.synthetic import Phenomena, series

CHANGES = {"+3%": ("step", 0.03), "+5%": ("step", 0.05), "+10%": ("step", 0.10),
           "+20%": ("step", 0.20), "ramp +10%/2000": ("ramp", 0.10)}
DETECTORS = ("stepwatch", "z3", "mad3", "hud", "fixed7")
BLOCK, TRAIL = 10, 100


def run_stepwatch(t: list, cfg) -> list[tuple[int, int]]:
    """(raise step, onset step) of every drift episode, in order."""
    engine, now = DetectionEngine(cfg), 1.7e9
    book, raised = AlertBook(1e12, cfg.resolve_hold_s, steps=engine.last_step), []
    for i, dt in enumerate(t, 1):
        now += dt
        engine.step("bench", 0, i, now, dt)
        if engine.changed:
            engine.take_touched()
            for a in book.update(now, engine.conditions()):
                if a.state == "firing" and len(a.history) == 1:
                    raised.append((i, a.step))
        elif i % 50 == 0:
            book.update(now, engine.conditions())  # holds run on data time
    return raised


def run_rule(t: list, rule: str) -> list[tuple[int, int]]:
    """(raise step, raise step) of every rising edge of a block rule."""
    blocks = [statistics.median(t[i:i + BLOCK]) for i in range(0, len(t) - BLOCK + 1, BLOCK)]
    raised, prev_flag, prev_over = [], False, False
    for k in range(TRAIL, len(blocks)):
        win, cur = blocks[k - TRAIL:k], blocks[k]
        med = statistics.median(win)
        if rule == "z3":
            flag = cur > statistics.fmean(win) + 3 * statistics.pstdev(win)
        elif rule == "mad3":
            flag = cur > med + 3 * 1.4826 * statistics.median(abs(v - med) for v in win)
        elif rule == "hud":
            over = cur >= 1.05 * med
            flag, prev_over = over and prev_over, over
        else:
            flag = cur > 1.07 * med
        if flag and not prev_flag:
            step = (k + 1) * BLOCK
            raised.append((step, step))
        prev_flag = flag
    return raised


def task(job: tuple) -> list[dict]:
    """One seed at one noise level: every change and its healthy twin, every detector."""
    seed, cv, a = job
    cfg, ph, n = parse_detection(a["detection"]), Phenomena(cv=cv, wobble=a["wobble"]), a["at"] + a["post"]
    out = []
    for name, change in CHANGES.items():
        twin = series(seed, n, ph)
        changed = series(seed, n, ph, change, a["at"])
        for d in DETECTORS:
            run = (lambda t: run_stepwatch(t, cfg)) if d == "stepwatch" else (lambda t: run_rule(t, d))
            healthy, after = run(twin), run(changed)
            pre = [r for r in after if r[0] < a["at"]]
            post = [r for r in after if r[0] >= a["at"]]
            out.append({"detector": d, "change": name, "cv": cv, "false": len(healthy) + len(pre),
                        "healthy_steps": n + a["at"] - 1,
                        "delay": post[0][0] - a["at"] if post else None,
                        "onset_error": post[0][1] - a["at"] if post else None,
                        "episodes_after": len(post)})
    return out


def summarize(rows: list[dict]) -> dict:
    table = {}
    for d in DETECTORS:
        mine = [r for r in rows if r["detector"] == d]
        false, steps = sum(r["false"] for r in mine), sum(r["healthy_steps"] for r in mine)
        entry = {"false_alarms_per_1e4_steps": round(1e4 * false / steps, 3), "false_alarms": false,
                 "healthy_steps": steps}
        for name in CHANGES:
            cell = [r for r in mine if r["change"] == name]
            delays = sorted(r["delay"] for r in cell if r["delay"] is not None)
            errors = sorted(abs(r["onset_error"]) for r in cell if r["onset_error"] is not None)
            entry[name] = {"detected": f"{len(delays)}/{len(cell)}",
                           "delay_median": statistics.median(delays) if delays else None,
                           "delay_p90": _p90(delays), "onset_error_median": statistics.median(errors) if errors else None,
                           "onset_error_p90": _p90(errors),
                           "episodes_after_max": max((r["episodes_after"] for r in cell), default=0)}
        table[d] = entry
    return table


def _p90(values: list) -> float | None:
    return values[min(len(values) - 1, int(0.9 * len(values)))] if values else None


def environment() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    from importlib.metadata import version
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "stepwatch": version("stepwatch"), "git_commit": commit, "platform": platform.platform()}


def table_md(table: dict) -> str:
    lines = ["| detector | false alarms / 10^4 healthy steps | " + " | ".join(CHANGES) + " |",
             "|---|---:|" + "---|" * len(CHANGES)]
    for d in DETECTORS:
        row, cells = table[d], []
        for name in CHANGES:
            c = row[name]
            if c["delay_median"] is None:
                cells.append(f"— ({c['detected']})")
                continue
            onset = f"; onset ±{c['onset_error_median']:.0f}/{c['onset_error_p90']:.0f}" if d == "stepwatch" else ""
            cells.append(f"{c['delay_median']:.0f} / {c['delay_p90']:.0f} ({c['detected']}{onset}; "
                         f"≤{c['episodes_after_max']} ep.)")
        lines.append(f"| {d} | {row['false_alarms_per_1e4_steps']:.3f} ({row['false_alarms']}) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


ANALYSIS = "## Analysis"


def markdown(doc: dict, previous: str = "") -> str:
    """The measurement part, then the hand-written ``## Analysis`` section of ``previous`` if any."""
    a, env = doc["parameters"], doc["environment"]
    out = ["# Detection backtest: stepwatch vs rules used in practice", "",
           f"Generated by `{doc['command']}` on {doc['date']} in {doc['wall_s']} s.", "",
           f"- Device: {env['cpu']}, {env['cpus']} CPU(s); {env['platform']}",
           f"- Versions: Python {env['python']}, stepwatch {env['stepwatch']} (git {env['git_commit'] or '?'})",
           f"- Series: collector/tools/synthetic.py defaults (40 ms steps, evaluation pause every 1,000 "
           f"steps, checkpoint every 2,000, GC spikes, data-loader bursts, +-{a['wobble']:.1%} wobble); change at step "
           f"{a['at']:,}, {a['post']:,} steps after it; {a['seeds']} seeds per noise level, each change with "
           f"its healthy twin.",
           f"- stepwatch settings: defaults{' + ' + a['detection'] if a['detection'] else ''}", "",
           "Cells: delay from the change to the first raise, median / p90 in steps (changes raised within "
           "the window); for stepwatch the onset error |reported onset - change| median/p90 and the most "
           "episodes one change raised. False alarms: raises per 10^4 healthy steps (count in brackets).", ""]
    for cv, table in doc["results"].items():
        healthy = table["stepwatch"]["healthy_steps"]
        out += [f"### Noise CV {cv} ({healthy:,} healthy steps)", "", table_md(table), ""]
    text = "\n".join(out)
    if ANALYSIS in previous:
        text += "\n" + previous[previous.index(ANALYSIS):]
    return text


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds per noise level")
    p.add_argument("--cv", type=float, nargs="+", default=[0.02, 0.03, 0.04], help="step-time noise CVs")
    p.add_argument("--at", type=int, default=7500, help="step the change starts at (between two evaluation pauses; 300 s of 40 ms steps: the drift detector arms at 180 s)")
    p.add_argument("--post", type=int, default=15000, help="steps simulated after the change starts (600 s: the info window is 240 s, the +3%% target 10 minutes)")
    p.add_argument("--wobble", type=float, default=0.015, help="amplitude of the slow wobble (0.015: +-1.5%%)")
    p.add_argument("--detection", default="", help="stepwatch detection settings (YAML), default: defaults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", help="write the JSON document here")
    p.add_argument("--md", help="write the markdown report here (keeps its '## Analysis' section)")
    args = p.parse_args(argv)
    a = {k: getattr(args, k) for k in ("seeds", "cv", "at", "post", "wobble", "detection", "seed")}
    jobs = [(args.seed * 1_000_003 + 1000 * j + i, cv, a) for j, cv in enumerate(args.cv) for i in range(args.seeds)]
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        rows = [r for chunk in pool.map(task, jobs) for r in chunk]
    argv_used = sys.argv[1:] if argv is None else list(argv)
    doc = {"command": " ".join(["python", "bench/detection.py", *argv_used]),
           "environment": environment(), "date": time.strftime("%Y-%m-%d"),
           "wall_s": round(time.perf_counter() - t0, 1), "parameters": a,
           "results": {str(cv): summarize([r for r in rows if r["cv"] == cv]) for cv in args.cv}}
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
