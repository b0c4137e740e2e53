"""Same behaviour, shown: every real recording replayed through the collector's own pipeline,
each alert episode it raises written down whole, and two such dumps compared.

    python bench/detection_compare.py --out /tmp/before.json            # on the old code
    python bench/detection_compare.py --out /tmp/after.json --against /tmp/before.json

Arms per recording (``tests/data/real/*.jsonl.gz``, default detection settings):
``recorded`` (as it is); ``step10`` (+10% from 300 s after the first step, its time in the
backward phase where the recording has phase times, else in the step times alone);
``pulses`` (four +10% pulses from 240 s, 90 s on and 140 s off, backward, loader, optimizer,
none); ``loader`` (multi-rank recordings: rank 1's data loader 20% of a step slower from
300 s); ``rerun`` (the recording played twice as two runs of one job, the second 8% slower:
the run comparison). Every episode of every alert name is kept: name, rank, severity history,
onset and raise and resolve steps and times, the summary raised and at the end, the why, how
it was decided and its evidence, and the earlier onsets of a further change.

With ``--against`` the script exits 1 and prints each difference when the two dumps differ in
any arm of any recording; 0 and "identical" otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

from stepwatch.collector._replay import replay
from stepwatch.collector.detect import parse_detection
from stepwatch.collector.tools.corpus import events, first_step_time, inject, load, pulses, rerun, slow_loader

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "..", "tests", "data", "real")
_FIELDS = ("alertname", "rank", "severity", "state", "starts_at", "step", "fired_at", "ends_at", "raised_step",
           "resolved_step", "fired_summary", "summary", "peak_ratio", "history", "diagnosis", "decided",
           "evidence", "earlier", "onset_at", "onset_raised")


def _has_phases(lines: list) -> bool:
    return any(o["kind"] == "batch" and o["batch"].get("phase_times") for o in lines[:400])


def _ranks(lines: list) -> int:
    return len({int(o.get("rank", 0)) for o in lines if o["kind"] == "batch"})


def _arms(lines: list) -> dict:
    t0 = first_step_time(lines)
    phased = _has_phases(lines)
    out = {"recorded": lines,
           "step10": inject(lines, "step", 0.10, t0 + 300, 0.0, "backward" if phased else None)}
    out["pulses"] = pulses(lines, [w if phased or w in (None, "loader") else None
                                   for w in ("backward", "loader", "optimizer", None)], t0 + 240)[0]
    if _ranks(lines) > 1:
        steps = sorted(float(s["duration_s"]) for o in lines if o["kind"] == "batch"
                       for s in o["batch"].get("steps", ()))
        out["loader"] = slow_loader(lines, 1, 0.2 * steps[len(steps) // 2], t0 + 300)
    end = max(float(o["time"]) for o in lines)
    second = rerun(inject(lines, "step", 0.08, t0, 0.0), end + 30.0, "second-run")
    out["rerun"] = lines + second
    return out


def _plain(v):
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    return v


def one(path: str) -> tuple[str, dict]:
    """``(name, {arm: [episode, ...]})`` for one recording."""
    cfg = parse_detection(None)
    out = {}
    for arm, lines in _arms(load(path)).items():
        out[arm] = [_plain({f: getattr(a, f) for f in _FIELDS} | {"job": a.job})
                    for a in replay(events(lines), cfg)]
    return os.path.basename(path), out


def differences(old: dict, new: dict) -> list[str]:
    out = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            out.append(f"{name}: only in the {'new' if a is None else 'old'} dump")
            continue
        for arm in sorted(set(a) | set(b)):
            ea, eb = a.get(arm, []), b.get(arm, [])
            if len(ea) != len(eb):
                out.append(f"{name} {arm}: {len(ea)} episodes before, {len(eb)} after")
            for i, (x, y) in enumerate(zip(ea, eb)):
                for f in sorted(set(x) | set(y)):
                    if x.get(f) != y.get(f):
                        out.append(f"{name} {arm} #{i} {x.get('alertname')} rank {x.get('rank')}: {f}: "
                                   f"{str(x.get(f))[:200]!r} -> {str(y.get(f))[:200]!r}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recordings", nargs="*", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--against", default=None, help="an earlier dump: print the differences, exit 1 if any")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = p.parse_args()
    paths = a.recordings or [os.path.join(REAL, n) for n in sorted(os.listdir(REAL)) if n.endswith(".jsonl.gz")]
    doc = {}
    with ProcessPoolExecutor(a.jobs) as pool:
        for name, arms in pool.map(one, paths):
            doc[name] = arms
            print(name, {arm: len(e) for arm, e in arms.items()}, flush=True)
    with open(a.out, "w") as fh:
        json.dump(doc, fh, indent=0, sort_keys=True)
    episodes = sum(len(e) for arms in doc.values() for e in arms.values())
    print(f"{len(doc)} recordings, {episodes} episodes -> {a.out}")
    if a.against:
        with open(a.against) as fh:
            old = json.load(fh)
        diff = differences(old, doc)
        for line in diff:
            print(line)
        print("identical" if not diff else f"{len(diff)} differences")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
