"""Step time before and after each profiler session in real A/B arms run one after the other
on one GPU (bench/run_real_device.sh ddp-arms), against the same before/after ratio at every
position of the arms without the agent (the host's own wander).

    python bench/window_arms_real.py bench/results/real_h200v --prefix h2v_s

Reads each arm's own step clock (NAME.steps.json, the job's host time per step) and, for an arm
with the agent, where its sessions ran (the profiled steps in its recording NAME.jsonl.gz; an
arm with windows not exported sends no window record, but its steps are still marked). A
session's figure: the median of ``--after`` steps from ``--gap`` steps after it closed over the
median of the ``--before`` steps before it opened.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stepwatch.collector.tools.corpus import around, load, rank_steps, runs  # noqa: E402


def profiled_runs(path: str) -> list:
    """(first, last) step of each run of profiled steps of rank 0."""
    steps = rank_steps(load(path))
    return runs(k for k, (_, profiled) in steps.items() if profiled)


def ratio(s: list, first: int, last: int, a: argparse.Namespace):
    """After / before medians around steps first..last (1-based), or None when short."""
    return around(s, first, last, a.before, a.gap, a.after, min_before=a.before // 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--prefix", default="")
    p.add_argument("--before", type=int, default=1000)
    p.add_argument("--after", type=int, default=2000)
    p.add_argument("--gap", type=int, default=50)
    p.add_argument("--null-every", type=int, default=250, help="spacing of the null's positions")
    p.add_argument("--null-arms", default="none",
                   help="comma-separated arms whose positions are the null (default: none, no agent; "
                        "'none,default' adds the agent without windows: no session ran in it)")
    a = p.parse_args()
    rows, null = [], []
    print(f"| arm | steps | median after 30 s (ms) | thirds (ms) | sessions: step, s into the job, after/before |")
    print("|---|---:|---:|---|---|")
    for path in sorted(glob.glob(os.path.join(a.dir, a.prefix + "*.steps.json"))):
        name = os.path.basename(path)[:-len(".steps.json")]
        s = json.load(open(path))["step_s"]
        cum, t = [], 0.0
        for x in s:
            t += x
            cum.append(t)
        k30 = next(i for i, c in enumerate(cum) if c >= 30)
        q = len(s) - k30
        thirds = [statistics.median(s[k30 + i * q // 3:k30 + (i + 1) * q // 3]) for i in range(3)]
        rec = path[:-len(".steps.json")] + ".jsonl.gz"
        cells = []
        if name.rsplit("_", 1)[-1] in a.null_arms.split(","):
            for k in range(a.before + 1, len(s), a.null_every):
                r = ratio(s, k, k, a)
                if r is not None:
                    null.append(r)
        elif os.path.exists(rec):
            for first, last in profiled_runs(rec):
                r = ratio(s, first, last, a)
                short = "too few steps before" if first <= a.before // 2 else "too close to the end"
                cells.append(f"{first}, {cum[first - 1]:.0f} s, " + (f"**{r:.3f}**" if r else short))
                if r:
                    rows.append((name, r))
        print(f"| {name} | {len(s)} | {statistics.median(s[k30:]) * 1e3:.2f} | "
              + " / ".join(f"{x * 1e3:.2f}" for x in thirds) + " | " + ("; ".join(cells) or "-") + " |")
    if null:
        null.sort()
        n = len(null)
        print(f"\nArms {a.null_arms} (no session), the same ratio at {n} positions {a.null_every} steps apart: min {null[0]:.3f}, "
              f"5th percentile {null[n // 20]:.3f}, median {statistics.median(null):.3f}, "
              f"95th percentile {null[-(n // 20) - 1]:.3f}, max {null[-1]:.3f}")
        for name, r in rows:
            above = sum(x >= r for x in null) / n
            print(f"- {name}: {r:.3f}, at or above it in {above:.0%} of the null's positions")


if __name__ == "__main__":
    main()
