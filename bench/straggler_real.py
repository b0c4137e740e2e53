"""Stragglers on the real multi-GPU recordings with a cause on one rank (tests/data/real/phases):
replay each at the collector's defaults and list who was named a straggler, when, and by what
evidence, against the change's time in the README beside the recordings.

    python bench/straggler_real.py --md bench/results/straggler_real.md

One row per recording of two ranks or more that has a row in tests/data/real/phases/README.md
(its "injected at" column: Unix time and step, or "-" for a healthy job). Columns: the change,
the ranks named after it with the delay in seconds and the evidence (phase times in sync or in
backward, step or data-loader wait, GPU activity, profiler windows), and every straggler episode
raised before the change or on a healthy job (false).
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PHASES = ROOT / "tests" / "data" / "real" / "phases"


def changes() -> dict:
    """{file: (Unix time, step) or None} from the README's tables (the last column)."""
    out = {}
    for line in (PHASES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].endswith(".jsonl.gz"):
            continue
        m = re.fullmatch(r"([0-9.]+), ([0-9,]+)", cells[-1])
        out[cells[0]] = (float(m.group(1)), int(m.group(2).replace(",", ""))) if m else None
    return out


def evidence(summary: str, found: tuple = ()) -> str:
    """Which rule a straggler episode (its summary as raised, what it found) came from."""
    from stepwatch.collector.detect._phase_rule import WAIT_IN_BACKWARD
    from stepwatch.collector.detect._straggler import GPU_BUSIER
    kinds = []
    if WAIT_IN_BACKWARD in summary:
        kinds.append("phases, wait in backward")
    elif "longer in sync" in summary:
        kinds.append("phases, wait in sync")
    if GPU_BUSIER in found:
        kinds.append("GPU activity")
    if "profiler windows" in summary:
        kinds.append("windows")
    if "data-loader wait" in summary and "own step" in summary:
        kinds.append("step / loader wait")
    return " + ".join(kinds) or "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--md", help="write the table here too")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from stepwatch.collector._replay import replay
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, load

    rows = ["| recording | ranks | change at | named after the change (s after it, evidence) | false (s from the change, or from the first step) |",
            "|---|---:|---|---|---|"]
    for name, change in sorted(changes().items()):
        path = PHASES / name
        if not path.exists():
            continue
        lines = load(str(path))
        ranks = {int(o.get("rank", 0)) for o in lines if o.get("kind") == "batch"}
        if len(ranks) < 2:
            continue
        first = min(float(s["end_time_s"]) for o in lines if o.get("kind") == "batch"
                    for s in o["batch"].get("steps", ()))
        alerts = [x for x in replay(events(lines), DetectionConfig()) if x.alertname == "StepwatchStragglerRank"]
        at = change[0] if change else None
        after = [x for x in alerts if at is not None and x.fired_at >= at]
        before = [x for x in alerts if at is None or x.fired_at < at]
        named = ", ".join(f"rank {x.rank} {x.fired_at - at:.1f} s ({evidence(x.fired_summary, x.found)})" for x in after) or "nobody"
        false = ", ".join(f"rank {x.rank} at {x.fired_at - (at or first):+.0f} s" for x in before) or "none"
        rows.append(f"| {name} | {len(ranks)} | {'-' if at is None else f'step {change[1]:,}'} | {named} | {false} |")
        print(rows[-1], flush=True)
    head = (f"# Stragglers on the real multi-GPU recordings\n\n`python bench/straggler_real.py --md ...` "
            f"(Python {platform.python_version()}), the collector's defaults. Change times: "
            "tests/data/real/phases/README.md.\n\n")
    if a.md:
        pathlib.Path(a.md).write_text(head + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
