"""Issue 65's targets per kind of job: bench/detection_real.py's and bench/evidence_pulses.py's
results on the real corpus, tabulated per kind (steady, launch-bound, wandering host, 2-GPU),
held out and all.

    python bench/detection_real_kinds.py --steps S.json [LONGER.json ...] [--ramps R15.json R30.json R60.json ...] \
        [--pulses P.json] [--md OUT.md]

A recording's kind is read from the recording itself (rank 0 after its first 3 minutes, when the
detector arms; a shorter recording after its first minute): **launch-bound** when its median step is under 20 ms; **wandering host** when its
30-s medians span 5% or more of the median (10th to 90th percentile); **2-GPU** when it has two
ranks; **steady** when it is none of these (a 1-GPU job, 20 ms or longer, its 30-s medians within
5%; a recording under 3 minutes long is judged from its first minute on, and one too short
for three such medians is not called wandering). A recording may be of two kinds (a 2-GPU job on a host that wanders): it counts in each.

Cells: within target / injected (a step: raised no later than 60 s for +10%, 3 min for +5%, 10 min
for +3% after it; a ramp: no later than 10 minutes after it reached +5%; a pulse: within 60 s in
an episode of its own), "ended first" where nothing was raised and the play ended before the
target time. False episodes: on the recordings as they are (steps run) and on the pulses' plays
(their false episodes, then those raised between pulses). ``--ramps`` files given later replace
an earlier file's entries for the same recording and ramp (the longer plays); so do ``--steps``
files after the first for a recording's steps (+3/+5/+10%; its false episodes stay those of the
first file, the recording as it is).

Each part is also counted over the injections that **move evidence**: a recording that carries
phase times (every injection moves its phase's device time, or the loader's wait, with the
step), or an injection into the loader's wait (every recording carries it). An injection into a
phase of a recording without phase times moves the step time alone: the host's own wander, as
far as the detector can tell, which issue 65 asks to need more before it is raised.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stepwatch.collector.tools.corpus import load  # noqa: E402

EVIDENCE = "evidence moves"  # the part's suffix for injections that move their evidence

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "real")
KINDS = ("steady", "launch-bound", "wandering host", "2-GPU")
STEPS = {"+10%": 60.0, "+5%": 180.0, "+3%": 600.0}
RAMPS = ("ramp +5%/15min", "ramp +5%/30min", "ramp +5%/60min")
RAMP_TARGET_S = 600.0
ARMED_S = 180.0        # the detector arms 3 minutes after a rank's first step (warm-up + settling)
LAUNCH_BOUND_S = 0.020
WANDER = 0.05
MEDIAN_S = 30.0


def traits(name: str) -> dict:
    """Rank 0's median step, the 10th-90th percentile span of its 30-s medians over that median
    (from 3 minutes after its first step), and the number of ranks."""
    ranks, pts, phases = set(), [], False
    for o in load(os.path.join(CORPUS, name)):
        if o["kind"] != "batch":
            continue
        rank = int(o.get("rank", 0))
        ranks.add(rank)
        phases = phases or bool(o["batch"].get("phase_times"))
        if rank == 0:
            pts += [(float(s["end_time_s"]), float(s["duration_s"])) for s in o["batch"].get("steps", ())
                    if not s.get("profiled")]
    pts.sort()
    t0 = pts[0][0]
    after = [(t, d) for t, d in pts if t - t0 >= ARMED_S]
    if not after or after[-1][0] - after[0][0] < 4 * MEDIAN_S:  # (a short recording: from its first minute on)
        after = [(t, d) for t, d in pts if t - t0 >= 60.0] or pts
    step = statistics.median(d for _, d in after)
    meds, cur, edge = [], [], after[0][0] + MEDIAN_S
    for t, d in after:
        if t >= edge:
            if cur:
                meds.append(statistics.median(cur))
            cur, edge = [], edge + MEDIAN_S * (1 + int((t - edge) // MEDIAN_S))
        cur.append(d)
    if len(meds) < 3:
        return {"step_ms": step * 1e3, "wander": None, "ranks": len(ranks), "phases": phases}  # (too short to say)
    q = statistics.quantiles(meds, n=10)
    return {"step_ms": step * 1e3, "wander": (q[8] - q[0]) / step, "ranks": len(ranks), "phases": phases}


def kinds_of(t: dict) -> list[str]:
    out = []
    if t["step_ms"] < LAUNCH_BOUND_S * 1e3:
        out.append("launch-bound")
    if t["wander"] is not None and t["wander"] >= WANDER:
        out.append("wandering host")
    if t["ranks"] >= 2:
        out.append("2-GPU")
    return out or ["steady"]


def _cell() -> dict:
    return {"within": 0, "injected": 0, "ended_first": 0}


def _count(cell: dict, delay, data_after, limit: float) -> None:
    cell["injected"] += 1
    if delay is not None and delay <= limit:
        cell["within"] += 1
    elif delay is None and data_after is not None and data_after < limit:
        cell["ended_first"] += 1


def moves_evidence(rec: dict, where) -> bool:
    """Whether an injection at ``where`` moves its evidence with the step on the recording ``rec``
    (its traits): it carries phase times, or the change is the loader's wait."""
    return bool(rec.get("phases")) or where == "loader"


def tabulate(steps: dict, ramps: list, pulses, longer: tuple = ()) -> tuple[dict, dict]:
    """``({name: traits + kinds + held_out}, {(part, kind, column): cell})``; part: "held out" /
    "all", each also with " (evidence moves)" (:func:`moves_evidence`). ``longer``: further steps
    runs whose entries replace the first's changes for their recordings."""
    recs: dict = {}
    for r in steps["recordings"]:
        recs[r["name"]] = {"held_out": r["held_out"], "steps": r, "changes": r["changes"]}
    for doc in longer:
        for r in doc["recordings"]:
            if r["name"] in recs:
                recs[r["name"]]["changes"] = {**recs[r["name"]]["changes"],
                                              **{c: v for c, v in r["changes"].items() if c in STEPS}}
                recs[r["name"]]["longer"] = r.get("repeat", 1)
    ramp_of: dict = {}
    for doc in ramps:
        for r in doc["recordings"]:
            for change in RAMPS:
                if r["changes"].get(change):
                    ramp_of[(r["name"], change)] = r["changes"][change]
    pulses_of = {r["name"]: r for r in (pulses or {}).get("recordings", ())}
    table: dict = {}
    for name, rec in recs.items():
        rec.update(traits(name))
        rec["kinds"] = kinds_of(rec)
        parts = ("held out", "all") if rec["held_out"] else ("all",)
        for part in parts + tuple(f"{p} ({EVIDENCE})" for p in parts):
            only = part.endswith(f"({EVIDENCE})")
            for kind in rec["kinds"]:
                def cell(col):
                    return table.setdefault((part, kind, col), _cell())
                fe = cell("false episodes")
                fe["injected"] += 1
                fe["within"] += len(rec["steps"].get("healthy_episodes", ()))
                for change, limit in STEPS.items():
                    for c in rec["changes"].get(change, ()):
                        if not only or moves_evidence(rec, c.get("where")):
                            _count(cell(change), c.get("delay_s") if c.get("raised") else None,
                                   c.get("data_after_s"), limit)
                for change in RAMPS:
                    for c in ramp_of.get((name, change), ()):
                        if not only or moves_evidence(rec, c.get("where")):
                            _count(cell(change), c.get("delay_s") if c.get("raised") else None,
                                   c.get("data_after_s"), RAMP_TARGET_S)
                p = pulses_of.get(name)
                if p is not None:  # (the pulses are played only on recordings with phase times)
                    pc, pf = cell("pulses"), cell("pulse plays false / between")
                    pf["injected"] += 1
                    pf["within"] += len(p.get("false_episodes", ()))
                    for x in p["arms"]["evidence"]:
                        pc["injected"] += 1
                        pf["ended_first"] += len(x.get("between", ()))
                        if x.get("own") and x.get("raised_s") is not None and x["raised_s"] <= 60.0:
                            pc["within"] += 1
    return recs, table


def render(recs: dict, table: dict, sources: list[str]) -> str:
    cols = list(STEPS)[::-1] + list(RAMPS) + ["pulses"]
    head = ("| part | kind | recordings | false episodes (as recorded) | " + " | ".join(cols)
            + " | pulse plays: false episodes / raised between pulses |")
    out = ["# Issue 65's targets per kind of job", "", "    " + " \\\n      ".join(sources), "",
           "Kinds as bench/detection_real_kinds.py reads them from each recording (rank 0 after its "
           "first 3 minutes): launch-bound under 20 ms a step; wandering host when its 30-s medians "
           "span 5% or more (10th-90th percentile); 2-GPU; steady otherwise. A recording may count "
           "in two kinds. Cells: within target / injected (ended first: nothing raised before the "
           "play ended).", "", head, "|" + "---|" * (5 + len(cols))]
    for part in ("held out", "all", f"held out ({EVIDENCE})", f"all ({EVIDENCE})"):
        for kind in KINDS:
            n = table.get((part, kind, "false episodes"))
            if n is None:
                continue
            row = [part, kind, str(n["injected"]), str(n["within"])]
            for col in cols:
                c = table.get((part, kind, col))
                if c is None or not c["injected"]:
                    row.append("-")
                    continue
                ef = f", ended first {c['ended_first']}" if c["ended_first"] else ""
                row.append(f"{c['within']}/{c['injected']}{ef}")
            pf = table.get((part, kind, "pulse plays false / between"))
            row.append(f"{pf['within']} / {pf['ended_first']}" if pf else "-")
            out.append("| " + " | ".join(row) + " |")
    out += ["", "| recording | held out | kinds | step (ms) | 30-s medians' span | ranks | phase times | steps played |",
            "|---|---|---|---:|---:|---:|---|---:|"]
    for name in sorted(recs):
        r = recs[name]
        out.append(f"| {name} | {'yes' if r['held_out'] else 'no'} | {', '.join(r['kinds'])} | "
                   f"{r['step_ms']:.1f} | {'-' if r['wander'] is None else format(r['wander'], '.1%')} | {r['ranks']} | "
                   f"{'yes' if r.get('phases') else 'no'} | {r.get('longer', r['steps'].get('repeat', 1))}x |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", nargs="+", required=True,
                   help="bench/detection_real.py's JSON with the steps (+3/+5/+10%%); later ones (longer plays) "
                        "replace the first's steps for their recordings")
    p.add_argument("--ramps", nargs="*", default=[], help="its JSONs with ramps; later ones replace earlier entries")
    p.add_argument("--pulses", default=None, help="bench/evidence_pulses.py's JSON")
    p.add_argument("--md")
    a = p.parse_args()
    steps, *longer = [json.load(open(f)) for f in a.steps]
    ramps = [json.load(open(f)) for f in a.ramps]
    pulses = json.load(open(a.pulses)) if a.pulses else None
    recs, table = tabulate(steps, ramps, pulses, tuple(longer))
    sources = [d.get("command", f) for d, f in zip([steps, *longer], a.steps)] + [d.get("command", "") for d in ramps] + (
        [pulses.get("command", "")] if pulses else [])
    text = render(recs, table, sources)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
