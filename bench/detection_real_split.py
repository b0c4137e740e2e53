"""bench/detection_real.py's results split by whether the recording carries the evidence that the
issue's injections move (sampled phase times): raised within target / injected, per part.

    python bench/detection_real_split.py bench/results/detection_real_redated.json

A change counts as raised within target when raised no later than 60 s (+10%), 180 s (+5%) or
600 s (+3%) after it; "ended first" when nothing was raised and the recording ends before that
time; the others are missed (listed with their delay, None where never raised). Recordings made
before the agent sampled phase times carry no evidence: an injection there moves the step times
alone, which the detector must judge as a host's wander would be judged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stepwatch.collector.tools.corpus import load  # noqa: E402

TARGET_S = {"+10%": 60.0, "+5%": 180.0, "+3%": 600.0}
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "real")


def has_phases(name: str) -> bool:
    return any(o["kind"] == "batch" and o["batch"].get("phase_times") for o in load(os.path.join(CORPUS, name)))


def split(doc: dict) -> dict:
    """``{(held_out, phases, change): {"within", "injected", "ended_first", "missed": [...]}}``."""
    phases: dict = {}
    out: dict = {}
    for r in doc["recordings"]:
        name = r["name"]
        if name not in phases:
            phases[name] = has_phases(name)
        for change, limit in TARGET_S.items():
            for c in r["changes"].get(change, ()):
                cell = out.setdefault((r["held_out"], phases[name], change),
                                      {"within": 0, "injected": 0, "ended_first": 0, "missed": []})
                cell["injected"] += 1
                delay = c.get("delay_s") if c.get("raised") else None
                if delay is not None and delay <= limit:
                    cell["within"] += 1
                elif delay is None and c.get("data_after_s", float("inf")) < limit:
                    cell["ended_first"] += 1
                else:
                    cell["missed"].append((name, delay))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json")
    doc = json.load(open(p.parse_args().json))
    print("| part | recordings carry phase times | change | within target / injected | ended first | missed (delay s) |")
    print("|---|---|---|---:|---:|---|")
    for (held, ph, change), c in sorted(split(doc).items(), key=lambda kv: (not kv[0][0], not kv[0][1], list(TARGET_S).index(kv[0][2]))):
        missed = ", ".join(f"{n.split('.')[0]} ({d if d is None else round(d, 1)})" for n, d in c["missed"])
        print(f"| {'held out' if held else 'tuning'} | {'yes' if ph else 'no'} | {change} | "
              f"{c['within']}/{c['injected']} | {c['ended_first']} | {missed or '-'} |")


if __name__ == "__main__":
    main()
