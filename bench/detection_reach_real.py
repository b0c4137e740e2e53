"""Does the drift detector's own reading of what it can see (``drift_reach``) tell, before a
change, whether the change will be raised? On every real recording (tests/data/real): replay it
up to ``--at`` s after its first step and read each rank's reach (the smallest sustained shift
each severity raises at the job's noise then), then replay it with a step-time shift of
``--ratio`` injected from that moment and see what is raised.

    python bench/detection_reach_real.py --md bench/results/detection_reach_real.md

One row per recording: the critical reach at the injection (the smallest over the ranks), the
drift episodes from 30 s before the change on (first severity, seconds after the change), and
whether the reach foretold the outcome (reach <= ratio: critical within ``--within`` s).
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "real"


def outcome(lines: list, at: float, ratio: float) -> list:
    """(first severity, seconds after ``at``, severity history) of each drift episode whose
    onset is at most 30 s before ``at``, with ``ratio`` injected from ``at``."""
    from stepwatch.collector._replay import replay
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, inject
    alerts = replay(events(inject(lines, "step", ratio, at, 0)), DetectionConfig())
    return [(a.history[0][1], a.fired_at - at, [(t - at, sev) for t, sev in a.history])
            for a in alerts if a.alertname == "StepwatchThroughputDrift" and a.starts_at >= at - 30]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at", type=float, default=240.0, help="seconds after the first step")
    p.add_argument("--ratio", type=float, default=0.10)
    p.add_argument("--within", type=float, default=60.0)
    p.add_argument("--md", help="write the table here too")
    a = p.parse_args()
    from stepwatch.collector.tools.corpus import first_step_time, load, reach_at
    rows, agree, judged = [], 0, 0
    for path in sorted(REAL.glob("*.jsonl.gz")):
        lines = load(str(path))
        at = first_step_time(lines) + a.at
        reach = reach_at(lines, at)
        if not reach:
            rows.append(f"| {path.name} | not armed at {a.at:.0f} s | - | - | - |")
            continue
        crit = min(r["critical"] for r in reach.values())
        episodes = outcome(lines, at, a.ratio)
        raised = any(sev == "critical" and t <= a.within for *_, hist in episodes for t, sev in hist)
        told = (crit <= a.ratio) == raised
        judged += 1
        agree += told
        cells = ", ".join(f"{sev} at {t:.0f} s" for sev, t, _ in episodes) or "nothing"
        rows.append(f"| {path.name} | {100 * crit:.1f}% | {cells} | {'yes' if raised else 'no'} | "
                    f"{'yes' if told else '**no**'} |")
    head = (f"`python bench/detection_reach_real.py --at {a.at:g} --ratio {a.ratio:g} --within {a.within:g}` "
            f"(Python {platform.python_version()}): +{100 * a.ratio:g}% injected {a.at:g} s after each "
            f"recording's first step.\n\n"
            f"| recording | critical reach at the change (smallest over the ranks) | drift episodes raised "
            f"(first severity, after the change) | critical within {a.within:g} s | the reach foretold it |\n"
            f"|---|---:|---|---|---|")
    text = "\n".join([head, *rows, "", f"Foretold: {agree} of {judged} armed recordings."])
    print(text)
    if a.md:
        pathlib.Path(a.md).write_text("# The drift detector's reach against what it raised, on real recordings\n\n"
                                      + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
