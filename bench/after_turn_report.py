"""Does a job stay slower after a cause's turn ended? Its own clock, before and after each turn.

    python bench/after_turn_report.py STEPS.json [STEPS.json ...]

For each ``bench/real_job.py --steps-out`` file (one arm of an A/B, e.g. the agent attached or
not) and each turn of its ``--inject-schedule``: the median step over the 60 s before the turn
(the level), the median during it, 10-s medians from its end on as a ratio to the level, and the
median of the steps from 30 s to 150 s after its end (``after``: where a lasting after-effect of
the turn, such as the forward slowdown seen after ``empty_cache()`` in real_h100u.md, shows).
Times are the job's own: cumulative step times from the turn's first step. Prints one JSON
object per file.
"""

from __future__ import annotations

import json
import statistics
import sys


def turns(d: dict) -> list[dict]:
    steps = d["step_s"]
    out = []
    for t in d.get("schedule") or []:
        s, e = t["step"] - 1, t.get("end_step", len(steps)) - 1
        before, acc = [], 0.0
        for x in reversed(steps[:s]):
            acc += x
            if acc > 60:
                break
            before.append(x)
        level = statistics.median(before)
        tens, bucket, acc, start, after = [], [], 0.0, 0.0, []
        for x in steps[e:]:
            acc += x
            bucket.append(x)
            if 30 <= acc <= 150:
                after.append(x)
            if acc - start >= 10:
                tens.append(round(statistics.median(bucket) / level, 3))
                bucket, start = [], acc
        out.append({"cause": t["cause"], "level_ms": round(level * 1e3, 2),
                    "during": round(statistics.median(steps[s:e]) / level, 3),
                    "after_30_150s": round(statistics.median(after) / level, 3) if after else None,
                    "after_10s": tens})
    return out


def main(paths: list[str]) -> None:
    for p in paths:
        d = json.load(open(p))
        print(json.dumps({"file": p, "agent": d.get("agent"), "batch": d.get("batch"),
                          "median_ms": round(statistics.median(d["step_s"]) * 1e3, 2),
                          "turns": turns(d)}))


if __name__ == "__main__":
    main(sys.argv[1:])
