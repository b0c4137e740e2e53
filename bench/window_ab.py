"""Step time with and without the agent, and around each of its windows, from real jobs'
own clocks (bench/real_job.py ``--steps-out``: host time after ``loss.item()``, the same
measurement with or without the agent) and the collector's recording of the same job (which
steps the agent profiled).

    python bench/window_ab.py --steps bench/results/real_h100/*.steps.json \
        --recordings tests/data/real --md bench/results/window_ab_h100.md

Per job: the median step after its first 30 s; per window (a run of profiled steps): the
median step of the 5-55 s after the window over the 25 s before it (the agent's own check
uses the same spans), and the same spans around the same step numbers in a job without the
agent (its own drift: the reference).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics

from agent_ab_real import settled_steps  # (run from bench/: its folder is on the path)


def windows(recording: str) -> list[tuple[int, int]]:
    """(first, last) step of each run of rank 0's profiled steps."""
    profiled = []
    with gzip.open(recording, "rt") as fh:
        for line in fh:
            o = json.loads(line)
            if o["kind"] == "batch" and int(o.get("rank", 0)) == 0:
                profiled += [int(s["step"]) for s in o["batch"].get("steps", ()) if s.get("profiled")]
    runs: list[list[int]] = []
    for s in sorted(profiled):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return [tuple(r) for r in runs]


def around(step_s: list, first: int, last: int) -> float | None:
    """Median step 5-55 s after step ``last`` over the 25 s before step ``first`` (1-based)."""
    if last >= len(step_s):
        return None
    clock = [0.0]
    for d in step_s:
        clock.append(clock[-1] + d)
    t0, t1 = clock[first - 1], clock[last]
    before = [d for i, d in enumerate(step_s) if t0 - 25 <= clock[i] < t0]
    after = [d for i, d in enumerate(step_s) if t1 + 5 <= clock[i] < t1 + 55]
    if len(before) < 20 or len(after) < 20:
        return None
    return statistics.median(after) / statistics.median(before)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", nargs="+", required=True)
    p.add_argument("--recordings", nargs="+", default=[], help="recordings or folders of them")
    p.add_argument("--md")
    a = p.parse_args()
    recs = {}
    for r in a.recordings:
        for f in ([os.path.join(r, x) for x in os.listdir(r)] if os.path.isdir(r) else [r]):
            if f.endswith(".jsonl.gz"):
                recs[os.path.basename(f).split(".")[0]] = f
    jobs = {os.path.basename(f).split(".")[0]: json.load(open(f)) for f in a.steps}
    plain = [j for n, j in jobs.items() if j["agent"] == "none"]
    rows = ["| job | agent | env | steps | median step ms | windows: after/before (5-55 s vs 25 s) | "
            "same spans without the agent |", "|---|---|---|---:|---:|---|---|"]
    for name, job in sorted(jobs.items()):
        s = job["step_s"]
        kept = settled_steps(s, 30.0)
        rec = recs.get(name) or recs.get(name.replace("live_l", "h100_1gpu_l"))
        ratios, refs = [], []
        for first, last in (windows(rec) if rec else []):
            r = around(s, first, last)
            if r is not None:
                ratios.append(round(r, 4))
                refs += [round(x, 4) for x in (around(p["step_s"], first, last) for p in plain) if x]
        env = ",".join(f"{k}={v}" for k, v in job.get("env", {}).items() if k != "STEPWATCH_COLLECTOR" and k != "STEPWATCH_JOB")
        rows.append(f"| {name} | {job['agent']} | {env or '-'} | {len(s)} | {statistics.median(kept) * 1e3:.2f} | "
                    f"{ratios or '-'} | {refs or '-'} |")
    text = "\n".join(rows) + "\n"
    print(text)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
