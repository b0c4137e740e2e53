"""What the alerts lose without profiler windows (the agent's default is windows on demand):
every real recording with an injected cause, replayed at the default detection settings as
recorded (scheduled windows in them) and with every window summary taken out.

    python bench/diagnosis_without_windows.py [--md FILE]

Per recording: the first slowdown alert's first named cause (tests/data/real/diag), and the
ranks named as stragglers with the seconds from the first step to each (tests/data/real/phases),
both ways. A window asked for at the alert (on demand) comes after the onset, so it cannot add
the before/after kernel comparison either; what it adds is the kernel table of that moment.
"""

from __future__ import annotations

import argparse
import copy
import glob
import pathlib

from stepwatch.collector._replay import replay
from stepwatch.collector.detect import DetectionConfig
from stepwatch.collector.tools.corpus import events, first_step_time, load

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "real"


def without_windows(lines: list[dict]) -> list[dict]:
    out = []
    for o in lines:
        if o["kind"] == "batch" and o["batch"].get("windows"):
            o = copy.deepcopy(o)
            o["batch"]["windows"] = []
        out.append(o)
    return out


def first_cause(lines: list[dict]) -> str:
    alerts = [a for a in replay(events(lines), DetectionConfig())
              if a.alertname in ("StepwatchThroughputDrift", "StepwatchProfilerOverhead")]
    return (alerts[0].diagnosis or "(none)").split(";")[0] if alerts else "no alert"


def stragglers(lines: list[dict]) -> str:
    t0 = first_step_time(lines)
    named = [f"rank {a.rank} at {a.fired_at - t0:.0f} s" for a in replay(events(lines), DetectionConfig())
             if a.alertname == "StepwatchStragglerRank"]
    return ", ".join(named) or "none"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--md", help="write the tables here too")
    args = p.parse_args()
    rows = ["| recording | with windows: first cause | without windows |", "|---|---|---|"]
    for f in sorted(glob.glob(str(ROOT / "diag" / "*.jsonl.gz"))):
        lines = load(f)
        a, b = first_cause(lines), first_cause(without_windows(lines))
        rows.append(f"| {pathlib.Path(f).name} | {a} | {'same' if a == b else b} |")
    rows += ["", "| recording | with windows: stragglers named | without windows |", "|---|---|---|"]
    for f in sorted(glob.glob(str(ROOT / "phases" / "*.jsonl.gz"))):
        lines = load(f)
        a, b = stragglers(lines), stragglers(without_windows(lines))
        rows.append(f"| {pathlib.Path(f).name} | {a} | {'same' if a == b else b} |")
    text = "\n".join(rows)
    print(text)
    if args.md:
        pathlib.Path(args.md).write_text(text + "\n")


if __name__ == "__main__":
    main()
