"""The agent's window after-effect check (agent/_aftereffect.py) replayed on real jobs: each
recording's rank-0 step boundaries (their end times) and its windows (runs of profiled steps)
go through ``AftereffectWatch`` as the agent feeds it, under three rules (the one before the wobble rule, a longer before figure, and the default).

    python bench/aftereffect_real.py tests/data/real bench/results/real_h100 \
        bench/results/real_h100b --md bench/results/aftereffect_real.md

Two figures per rule:
- back-offs on the jobs as recorded (no after-effect was injected; one the agent took live
  is a back-off the rule repeats here);
- injected after-effects found: for every window with 55 s of steps after it, the steps after
  its close are made ``1 + x`` slower (x = 2, 3, 5, 13%) and the window's own check must say
  lasting.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stepwatch.agent._aftereffect import AftereffectWatch  # noqa: E402
from stepwatch.collector.tools.corpus import load, rank_steps, runs  # noqa: E402

INJECT = (0.02, 0.03, 0.05, 0.13)


def boundaries(path: str) -> tuple[list[float], list[bool]]:
    """Rank 0's step end times and whether each step was profiled, in step order."""
    steps = rank_steps(load(path))
    ordered = [steps[k] for k in sorted(steps)]
    return [t for t, _ in ordered], [p for _, p in ordered]


RULES = {  # name: AftereffectWatch keywords
    "25 s before, 2%": {"before_s": 25.0, "wobble": False},
    "60 s before, 2%": {"before_s": 60.0, "wobble": False},
    "60 s before, 2% or the wobble before (default)": {},
}


def replay(times: list[float], profiled: list[bool], rule: str, until: float = float("inf")):
    """[(window index, ratio, lasting)] for every finished check, as the agent would make them."""
    watch = AftereffectWatch(**RULES[rule])
    out, window, in_session = [], -1, False
    for i, t in enumerate(times):
        if t > until:
            break
        if profiled[i] and not in_session:
            in_session, window = True, window + 1
            watch.opened(times[i - 1] if i else t)
        elif not profiled[i] and in_session:
            in_session = False
            watch.closed(str(window), times[i - 1])
        if not in_session:
            done = watch.step(t)
            if done:
                out.append((int(done[0]), done[1], done[2]))
    return out


def sessions(profiled: list[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of profiled steps."""
    return runs(i for i, p in enumerate(profiled) if p)


def slowed(times: list[float], after: int, x: float) -> list[float]:
    """Every step after index ``after`` takes 1 + x times as long."""
    t0 = times[after]
    return times[: after + 1] + [t0 + (t - t0) * (1 + x) for t in times[after + 1:]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="recordings (.jsonl.gz) or folders of them")
    p.add_argument("--md")
    a = p.parse_args()
    files = []
    for path in a.paths:
        files += sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".jsonl.gz")) \
            if os.path.isdir(path) else [path]
    groups = ("launch-bound 9-14 ms jobs", "44-140 ms jobs")
    rows = []
    totals = {(g, w): {"checks": 0, "backoffs": 0, **{x: [0, 0] for x in INJECT}} for g in groups for w in RULES}
    for f in files:
        times, prof = boundaries(f)
        if len(times) < 100:
            continue
        runs = sessions(prof)
        row = {"name": os.path.basename(f), "minutes": round((times[-1] - times[0]) / 60, 1), "windows": len(runs)}
        group = groups[0] if "_s." in f or "_s_" in f else groups[1]
        for wobble in RULES:
            checks = replay(times, prof, wobble)
            tot = totals[(group, wobble)]
            tot["checks"] += len(checks)
            backoffs = [round(r, 3) for _, r, lasting in checks if lasting]
            tot["backoffs"] += len(backoffs)
            row[wobble] = {"checks": len(checks), "backoffs": backoffs}
            for x in INJECT:
                for k, (first, last) in enumerate(runs):
                    if last + 1 >= len(times) or times[-1] - times[last] < 60:
                        continue
                    t = slowed(times, last, x)
                    got = [lasting for w, _, lasting in replay(t, prof, wobble, until=t[last] + 60) if w == k]
                    if not got:
                        continue  # no check for this window (voided by a session inside its spans)
                    tot[x][0] += 1
                    tot[x][1] += bool(got[0])
        rows.append(row)
        print(json.dumps(row))
    lines = ["| jobs | rule | checks | back-offs on the jobs as recorded | " + " | ".join(f"+{x:.0%} found" for x in INJECT) + " |",
             "|---|---|---:|---:|" + "---:|" * len(INJECT)]
    for group, wobble in totals:
        t = totals[(group, wobble)]
        lines.append(f"| {group} | {wobble} | {t['checks']} | {t['backoffs']} | "
                     + " | ".join(f"{t[x][1]}/{t[x][0]}" for x in INJECT) + " |")
    per = ["| recording | minutes | windows | " + " | ".join(f"back-offs ({w}): ratios" for w in RULES) + " |",
           "|---|---:|---:|" + "---|" * len(RULES)]
    for r in rows:
        per.append(f"| {r['name']} | {r['minutes']} | {r['windows']} | "
                   + " | ".join(str(r[w]['backoffs'] or '-') for w in RULES) + " |")
    text = "\n".join(lines) + "\n\n" + "\n".join(per) + "\n"
    print(text)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write("# Window after-effect check replayed on real jobs\n\n"
                     f"`python bench/aftereffect_real.py {' '.join(a.paths)} --md {a.md}`\n\n" + text)


if __name__ == "__main__":
    main()
