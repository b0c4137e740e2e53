"""A live job with causes turned on in turn (bench/real_job.py ``--inject-schedule``, run by
``bench/run_real_device.sh pulses-start``): per cause, whether the collector raised it within
``--target-s`` of its start in an episode (or a further change) of its own, the delay, how it
was decided and the first contributor of its why (right when it names the cause:
bench/phase_device_report.py's EXPECTED), and the seconds from the cause's end to the resolve;
and anything raised while the job was healthy: an onset before the first cause (30 s of slack), or
from 30 s after a cause's end, raised before the next cause began (or after the last).

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
    return {"name": name, "replayed": replayed, "healthy_raised": [
        {"alertname": o["alert"]["alertname"], "onset_before_first_s": round(first - o["onset"], 1),
         "raised_before_first_s": round(first - o["raised"], 1), "decided": o["decided"],
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
