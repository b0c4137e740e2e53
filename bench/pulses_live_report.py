"""A live job with causes turned on in turn (bench/real_job.py ``--inject-schedule``, run by
``bench/run_real_device.sh pulses-start``): per cause, whether the collector raised it within
``--target-s`` of its start in an episode (or a further change) of its own, the delay, how it
was decided and the first contributor of its why (right when it names the cause:
bench/phase_device_report.py's EXPECTED), and the seconds from the cause's end to the resolve;
and anything raised while the job was healthy: an onset before the first cause (30 s of slack), or
from 30 s after a cause's end, raised before the next cause began (or after the last). Each such
raise also gives ``job_clock_ratio``: the median of the job's own step times over the 60 s after
its onset against the time before it (at most 60 s, none of it before the last cause's end and
its slack), from NAME.steps.json (the schedule's starts and ends anchor its clock),
so that a real change of the job that no cause made (h100q's last 40 s, h200zza's +18%) is told
from a false raise by the reader; it is counted as raised while healthy either way. Per cause
also what the card made of it on the job's own clock (``step_change``: the median step during the
turn over the 1,200 steps before it), the size of change that is (``size``: the largest of
+10/+5/+3% whose raise threshold, 0.8x / 0.8x / 0.7x, it reaches) and whether it was raised
within that size's target (60 s / 3 min / 10 min: ``within_size_target``); ``within_target`` is
``--target-s`` (60 s) whatever the size.

    python bench/pulses_live_report.py FOLDER NAME [--replayed] [--md OUT.md]

FOLDER holds NAME.steps.json (the job's own clock and the schedule as run) and
NAME.alerts.json (the collector's /api/alerts at the end); ``--replayed``: the recording
NAME.jsonl.gz replayed with this code instead of the live alerts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from phase_device_report import EXPECTED, _right  # noqa: E402  (one list of what names each cause)

SLOWDOWNS = ("StepwatchThroughputDrift", "StepwatchProfilerOverhead")
SLACK_S = 30.0  # an onset this long before a cause's start, or after its end, is not that cause's


def _ts(v) -> float:
    if v is None:
        return None
    return float(v) if isinstance(v, (int, float)) else datetime.datetime.fromisoformat(
        str(v).replace("Z", "+00:00")).timestamp()


def onsets(alerts: list[dict]) -> list[dict]:
    """Every onset of every slowdown episode, with when it was raised and its why."""
    out = []
    for a in alerts:
        if a["alertname"] not in SLOWDOWNS or not a.get("fired_at"):
            continue
        earlier = a.get("earlier") or []
        raised = [_ts(a["fired_at"])] + [_ts(e["until"]) for e in earlier]
        steps = [(e["onset_at"], e.get("diagnosis", ""), e.get("decided", ""), e.get("raised", "")) for e in earlier]
        steps.append((a.get("onset_at") or a["starts_at"], a.get("diagnosis", ""), a.get("decided", ""),
                      a.get("summary", "")))
        for i, ((on, why, decided, summary), r) in enumerate(zip(steps, raised)):
            out.append({"alert": a, "onset": _ts(on), "raised": r, "further": i > 0, "why": why or "",
                        "decided": decided, "summary": summary, "ends": _ts(a.get("ends_at"))})
    return out


def _clock(steps: dict):
    """Unix time -> the job's step index: its step durations from the nearest cause start or end
    of the schedule (each known by step and time) at or before it."""
    import bisect
    import itertools
    durs = steps.get("step_s") or []
    anchors = sorted((t[k], t[s]) for t in steps.get("schedule") or []
                     for k, s in (("time", "step"), ("end_time", "end_step")) if t.get(k) and t.get(s))
    if not durs or not anchors:
        return None
    cum = [0.0] + list(itertools.accumulate(durs))  # cum[i]: the job's time at the start of step i
    times = [a for a, _ in anchors]

    def at(t: float) -> int:
        k = max(0, bisect.bisect_right(times, t) - 1)
        t0, s0 = anchors[k]
        s0 = min(s0, len(durs))
        return max(0, min(len(durs), bisect.bisect_left(cum, cum[s0] + (t - t0))))
    return at


def _clock_ratio(steps: dict, at, onset: float, span_s: float = 60.0):
    """The job's median step over ``span_s`` after ``onset`` against the time before it (at most
    ``span_s``, none of it before the last cause's end and its slack), or None."""
    import statistics
    if at is None:
        return None
    since = max((t["end_time"] + SLACK_S for t in steps.get("schedule") or ()
                 if t.get("end_time") and t["end_time"] + SLACK_S <= onset), default=float("-inf"))
    durs = steps["step_s"]
    lo, mid, hi = at(max(onset - span_s, since)), at(onset), at(onset + span_s)
    if mid - lo < 10 or hi - mid < 10:
        return None
    return round(statistics.median(durs[mid:hi]) / statistics.median(durs[lo:mid]), 3)


# issue 65's targets by the size of the change: (ratio, the detector's raise threshold as a share of
# it, seconds to raise it in)
CLASSES = ((0.10, 0.8, 60.0), (0.05, 0.8, 180.0), (0.03, 0.7, 600.0))
BEFORE_STEPS = 1200


def step_change(steps: dict, turn: dict):
    """The turn's change on the job's own clock: the median step during it over the median of the
    ``BEFORE_STEPS`` steps before it (as the results tables give it), or None."""
    import statistics
    durs = steps.get("step_s") or []
    a, b = turn["step"] - 1, (turn.get("end_step") or len(durs) + 1) - 1
    if a < 10 or b - a < 10 or b > len(durs):
        return None
    return statistics.median(durs[a:b]) / statistics.median(durs[max(0, a - BEFORE_STEPS):a]) - 1


def size_class(change):
    """The largest of +10/+5/+3% whose raise threshold the change reaches (``CLASSES``): (ratio,
    target seconds), or None when it reaches none (under what the detector raises at all)."""
    for ratio, share, seconds in CLASSES:
        if change is not None and change >= share * ratio:
            return ratio, seconds
    return None


def report(folder: str, name: str, replayed: bool = False, target_s: float = 60.0) -> dict:
    steps = json.load(open(os.path.join(folder, f"{name}.steps.json")))
    if replayed:
        from phase_device_report import _replayed
        alerts = _replayed(folder, name)
        for a in alerts:  # (replay's alerts as the API's)
            a.setdefault("onset_at", a.get("starts_at"))
    else:
        alerts = json.load(open(os.path.join(folder, f"{name}.alerts.json")))["alerts"]
    turns = steps.get("schedule") or []
    found = onsets(alerts)
    first = turns[0]["time"] if turns else float("inf")
    healthy = [o for o in found if o["onset"] < first - SLACK_S]
    # ... and between causes: an onset from SLACK_S after a cause's end, raised before the next
    # began (or after the last's end): the job ran with no cause on
    for k, t in enumerate(turns):
        end = t.get("end_time")
        nxt = turns[k + 1]["time"] if k + 1 < len(turns) else float("inf")
        if end is not None:
            healthy += [o for o in found if end + SLACK_S <= o["onset"] < nxt and o["raised"] < nxt]
    at = _clock(steps)
    rows = []
    for k, t in enumerate(turns):
        start, end = t["time"], t.get("end_time")
        nxt = turns[k + 1]["time"] if k + 1 < len(turns) else float("inf")
        mine = [o for o in found if start - 30 <= o["onset"] < nxt - 30]
        hit = min(mine, key=lambda o: o["raised"], default=None)
        why = ((hit or {}).get("why") or "").split("; ")
        named = next((w for w in why if w and not w.startswith("no measured")), "")
        rows.append({"cause": t["cause"], "step": t["step"],
                     "ms": round(t.get("ms", 0.0), 2),
                     "raised_s": None if hit is None else round(hit["raised"] - start, 1),
                     "further": None if hit is None else hit["further"],
                     "decided": None if hit is None else hit["decided"],
                     "first_named": named[:160],
                     "right": bool(named) and t["cause"] in EXPECTED and _right(t["cause"], named),
                     # (the end of the episode that raised it: a later episode whose onset came
                     # before the next cause is not this cause's)
                     "resolved_after_end_s": (round(hit["ends"] - end, 1) if hit and hit["ends"] and end else None),
                     "within_target": hit is not None and hit["raised"] - start <= target_s})
        # what the card made of the cause: an H100 turned 10% of the step's GEMMs in backward
        # into +4.6% (bench/results/real_h100x.md), judged by the target of that size
        change = step_change(steps, t)
        cls = size_class(change)
        rows[-1].update({"step_change": None if change is None else round(change, 4),
                         "size": None if cls is None else f"+{cls[0]:.0%}",
                         "within_size_target": None if cls is None else (hit is not None and hit["raised"] - start <= cls[1])})
    return {"name": name, "replayed": replayed, "healthy_raised": [
        {"alertname": o["alert"]["alertname"], "onset_before_first_s": round(first - o["onset"], 1),
         "raised_before_first_s": round(first - o["raised"], 1), "decided": o["decided"],
         "job_clock_ratio": _clock_ratio(steps, at, o["onset"]),
         "summary": o["summary"][:200]} for o in healthy], "causes": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("name")
    p.add_argument("--replayed", action="store_true")
    p.add_argument("--target-s", type=float, default=60.0)
    a = p.parse_args()
    print(json.dumps(report(a.folder, a.name, a.replayed, a.target_s), indent=1))


if __name__ == "__main__":
    main()
