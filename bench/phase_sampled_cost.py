"""The always-on phase times' cost on real jobs, from within each job: the median step of the
steps that carried phase times against the median of the steps that did not, on the job's own
clock (bench/real_job.py ``--steps-out``), the sampled steps read from the collector's recording
of the same job (``phase_times`` in its batches).

    python bench/phase_sampled_cost.py DIR [DIR...]

For every ``<name>.steps.json`` with a ``<name>.jsonl.gz`` beside it: steps after the first
30 s, profiled steps (windows) left out of both groups; a step is sampled when a phase_times
record names it. Prints per job: sampled steps, their median, the others' median, the
difference in percent of a step, and that difference times the share of steps sampled (the
cost to the job's median, about). Same machine, same minutes, same GPU: no arm to cross.

"local" is the median over sampled steps of each one's time against the median of the
unsampled steps next to it (up to ``_NEIGHBOURS`` on each side). The plain medians are biased
where the job's speed wanders: the sampler spends a share of wall time, so it samples a larger
share of the steps while they are slow (a launch-bound 12 ms H200 job whose minute medians
wandered 0.87-1.13x read +3.3% plain and +1.3% local).
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

from stepwatch.collector.tools.corpus import load

from agent_ab_real import settled_steps  # (run from bench/: its folder is on the path)

_NEIGHBOURS = 8


def sampled_and_profiled(recording: str) -> tuple[set, set]:
    sampled, profiled = set(), set()
    for rec in load(recording):
        if rec.get("kind") != "batch":
            continue
        batch = rec["batch"]
        sampled.update(int(p["step"]) for p in batch.get("phase_times", ()))
        profiled.update(int(s["step"]) for s in batch.get("steps", ()) if s.get("profiled"))
    return sampled, profiled


def job(steps_path: str) -> dict | None:
    recording = steps_path[:-len(".steps.json")] + ".jsonl.gz"
    if not os.path.exists(recording):
        return None
    step_s = json.load(open(steps_path))["step_s"]
    sampled, profiled = sampled_and_profiled(recording)
    if not sampled:
        return None
    on, off, local = [], [], []
    first = len(step_s) - len(settled_steps(step_s))  # the settled steps are the clock's last ones
    for i in range(first, len(step_s)):
        step = i + 1  # the job's own clock lists steps 1, 2, ... in order
        if step in profiled:
            continue
        if step in sampled:
            on.append(step_s[i])
            near = [step_s[j] for j in range(max(first, i - _NEIGHBOURS), min(len(step_s), i + _NEIGHBOURS + 1))
                    if j != i and j + 1 not in sampled and j + 1 not in profiled]
            if near:
                local.append(step_s[i] / statistics.median(near))
        else:
            off.append(step_s[i])
    if len(on) < 20 or len(off) < 20:
        return None
    m_on, m_off = statistics.median(on), statistics.median(off)
    diff = m_on / m_off - 1
    share = len(on) / (len(on) + len(off))
    diff_local = statistics.median(local) - 1
    return {"job": os.path.basename(steps_path)[:-len(".steps.json")], "sampled": len(on),
            "others": len(off), "sampled_ms": 1e3 * m_on, "others_ms": 1e3 * m_off,
            "diff_pct": 100 * diff, "share": share, "cost_pct": 100 * diff * share,
            "local_pct": 100 * diff_local, "local_cost_pct": 100 * diff_local * share}


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: phase_sampled_cost.py DIR [DIR...] (folders of <name>.steps.json "
                         "with <name>.jsonl.gz recordings beside them)")
    rows = [r for d in argv for p in sorted(glob.glob(os.path.join(d, "*.steps.json"))) if (r := job(p))]
    if not rows:
        raise SystemExit(f"no job with both its steps file and a recording holding phase times in {argv}")
    print("| job | sampled steps | others | median sampled (ms) | median others (ms) | difference | x share sampled "
          "| local difference | x share sampled |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['job']} | {r['sampled']} | {r['others']} | {r['sampled_ms']:.2f} | {r['others_ms']:.2f} | "
              f"{r['diff_pct']:+.2f}% | {r['cost_pct']:+.3f}% | {r['local_pct']:+.2f}% | {r['local_cost_pct']:+.3f}% |")
    print(f"\nmean cost to the median: {statistics.mean(r['cost_pct'] for r in rows):+.3f}% of a step, local "
          f"{statistics.mean(r['local_cost_pct'] for r in rows):+.3f}% ({len(rows)} jobs)")


if __name__ == "__main__":
    main(sys.argv[1:])
