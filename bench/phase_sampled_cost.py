"""The always-on phase times' cost on real jobs, from within each job: the median step of the
steps that carried phase times against the median of the steps that did not, on the job's own
clock (bench/real_job.py ``--steps-out``), the sampled steps read from the collector's recording
of the same job (``phase_times`` in its batches).

    python bench/phase_sampled_cost.py DIR [DIR...]
    python bench/phase_sampled_cost.py RECORDING.jsonl.gz [...]   # each rank's step times as recorded

For every ``<name>.steps.json`` (or a DDP rank's ``<name>.steps.r<N>.json``) with a
``<name>.jsonl.gz`` beside it: steps after the first
30 s, profiled steps (windows) left out of both groups; a step is sampled when a phase_times
record names it. Prints per job: sampled steps, their median, the others' median, the
difference in percent of a step, and that difference times the share of steps sampled (the
cost to the job's median, about). A job with a cause injected is read up to that cause's step.
Same machine, same minutes, same GPU: no arm to cross. Under DDP the ranks run in lockstep and
(before they chose the same steps) sampled different steps (2 x H200: 244 of 2,737 in common),
so a step sampled on any rank counts as sampled on each rank's clock.

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
import re
import statistics
import sys

from stepwatch.collector.tools.corpus import load

from agent_ab_real import settled_steps  # (run from bench/: its folder is on the path)

_NEIGHBOURS = 8


def sampled_and_profiled(recording: str) -> tuple[set, set]:
    """The steps that carried phase times and the profiled steps, on any rank."""
    return _sampled_and_profiled(load(recording))


def _sampled_and_profiled(records: list) -> tuple[set, set]:
    sampled, profiled = set(), set()
    for rec in records:
        if rec.get("kind") != "batch":
            continue
        batch = rec["batch"]
        sampled.update(int(p["step"]) for p in batch.get("phase_times", ()))
        profiled.update(int(s["step"]) for s in batch.get("steps", ()) if s.get("profiled"))
    return sampled, profiled


def job(steps_path: str) -> dict | None:
    m = re.match(r"(.*)\.steps(?:\.r(\d+))?\.json$", steps_path)
    name, rank = m.group(1), (int(m.group(2)) if m.group(2) else None)
    recording = name + ".jsonl.gz"
    if not os.path.exists(recording):
        return None
    clock = json.load(open(steps_path))
    step_s = clock["step_s"]
    if clock.get("injected"):  # a job with a cause injected (bench/real_job.py --inject): its steps before it
        step_s = step_s[:int(clock["injected"]["step"]) - 1]
    sampled, profiled = sampled_and_profiled(recording)
    if not sampled:
        return None
    first = len(step_s) - len(settled_steps(step_s))  # the settled steps are the clock's last ones
    # the job's own clock lists steps 1, 2, ... in order
    durations = {i + 1: step_s[i] for i in range(first, len(step_s))}
    return _measure(os.path.basename(name) + ("" if rank is None else f" rank {rank}"), durations, sampled, profiled)


def recording_jobs(recording: str) -> list[dict]:
    """Each rank of a recording read on its own: its step durations as its agent sent them (CUDA
    events, or the host clock), after its first 30 s, against the steps sampled on any rank."""
    records = load(recording)
    sampled, profiled = _sampled_and_profiled(records)
    by_rank: dict = {}
    for rec in records:
        if rec.get("kind") == "batch":
            steps = by_rank.setdefault(int(rec.get("rank", 0)), {})
            for st in rec["batch"].get("steps", ()):
                steps[int(st["step"])] = float(st["duration_s"])
    rows = []
    name = os.path.basename(recording).split(".jsonl")[0]
    for rank, steps in sorted(by_rank.items()):
        order = sorted(steps)
        kept = len(settled_steps([steps[k] for k in order]))  # the settled steps are the last ones
        settled = {k: steps[k] for k in order[len(order) - kept:]}
        row = _measure(f"{name} rank {rank}", settled, sampled, profiled) if sampled else None
        if row:
            rows.append(row)
    return rows


def _measure(label: str, durations: dict, sampled: set, profiled: set) -> dict | None:
    """The sampled steps of ``durations`` ({step: seconds}) against the others; None with fewer
    than 20 of either."""
    on, off, local = [], [], []
    for step, d in sorted(durations.items()):
        if step in profiled:
            continue
        if step in sampled:
            on.append(d)
            near = [durations[k] for k in range(step - _NEIGHBOURS, step + _NEIGHBOURS + 1)
                    if k != step and k in durations and k not in sampled and k not in profiled]
            if near:
                local.append(d / statistics.median(near))
        else:
            off.append(d)
    if len(on) < 20 or len(off) < 20:
        return None
    m_on, m_off = statistics.median(on), statistics.median(off)
    diff = m_on / m_off - 1
    share = len(on) / (len(on) + len(off))
    diff_local = statistics.median(local) - 1
    return {"job": label, "sampled": len(on),
            "others": len(off), "sampled_ms": 1e3 * m_on, "others_ms": 1e3 * m_off,
            "diff_pct": 100 * diff, "share": share, "cost_pct": 100 * diff * share,
            "local_pct": 100 * diff_local, "local_cost_pct": 100 * diff_local * share}


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: phase_sampled_cost.py DIR|RECORDING... (folders of <name>.steps.json "
                         "with <name>.jsonl.gz recordings beside them, or recordings read alone)")
    rows = []
    for d in argv:
        if d.endswith((".jsonl", ".jsonl.gz")):  # a recording alone: its ranks' own step times
            rows += recording_jobs(d)
        else:
            rows += [r for p in sorted(glob.glob(os.path.join(d, "*.steps*.json"))) if (r := job(p))]
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
