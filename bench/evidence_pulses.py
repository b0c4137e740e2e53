"""Changes that come back, each with its evidence, on the real recordings: detection decides
with the evidence (issue: every real slowdown raised, a host's wander never).

Each recording with sampled phase times (tests/data/real) is played as one job long enough
(``corpus.repeat`` at matching levels) for ``--pulses`` changes of ``--ratio`` on every rank,
each on for ``--on-s`` and off for ``--off-s`` of the recording's time, the first ``--at``
seconds after the first step. Per arm the time added is made of (``corpus.inject``'s
``where``): ``evidence``: a different phase's device time or the data-loader wait each time
(backward, data-loader wait, forward, optimizer, ...), as real causes are; ``none``: nothing
but the step time (the host's own pace: no evidence moves). Reported per pulse: raised within
``--target-s`` of its start in an episode of its own (raised between its start and the next
pulse's, its onset at most 60 s before it and after the pulse before ended), how
the episode was decided (``Condition.decided``: job / steps), and the seconds from the pulse's
end to the last rank's resolve; and the recording as it is (false episodes).

    python bench/evidence_pulses.py --md bench/results/evidence_pulses.md
    python bench/evidence_pulses.py --detection '{"drift": {"evidence": false}}'   # the steps alone
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
from typing import Optional

from stepwatch.collector._replay import replay
from stepwatch.collector.detect import parse_detection
from stepwatch.collector.tools.corpus import (events, first_step_time, load, matched_cut, pulses as pulse_train,
                                              repeat, seams as corpus_seams)

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "..", "tests", "data", "real")
sys.path.insert(0, HERE)
from detection_real import HELD_OUT, HOST_SHIFT  # noqa: E402  (the corpus's split and its real host changes)

WHERE = ["backward", "loader", "forward", "optimizer"]
DRIFT = "StepwatchThroughputDrift"
SLACK_S = 30.0  # an onset this long after a pulse's end is still that pulse's (bench/pulses_live_report.py's slack)


def _has_phases(path: str) -> bool:
    return any(o["kind"] == "batch" and o["batch"].get("phase_times") for o in load(path)[:400])


def landmarks(lines: list, base: list, times: int) -> tuple:
    """What :func:`classify` reads, once per recording: the seams of ``lines`` (``base`` played
    ``times`` times), where a copy's body starts on the recording's clock, and the end times of
    the recording's profiler windows."""
    seams = corpus_seams(lines) if times > 1 else []
    start = matched_cut(base)[0] if seams else None
    ends = [float(w["start_time_s"]) + float(w.get("span_s", 0.0)) for o in base if o["kind"] == "batch"
            for w in o["batch"].get("windows", ())]
    return seams, start, ends


def classify(onset: float, name: str, marks: tuple, raised: Optional[float] = None) -> str:
    """Where a false episode (its ``onset``, Unix; ``raised``: when it fired) of the recording
    ``name`` starts, given its :func:`landmarks`: "seam" (its onset, or its raise, within 60 s of
    a seam of the copies: the repetition's own level step, as bench/detection_real.py keeps
    apart; an episode the seam brought can be dated minutes before it), "host" (at or after the recording's real host
    change, ``HOST_SHIFT``, less 60 s, on the recording's own clock: not a false alarm there),
    "window" (within 30 s after one of the agent's recorded profiler windows ended, on the
    recording's clock), else "other". The totals count every kind; this says which."""
    seams, start, ends = marks
    if any(abs(onset - t) <= 60 or (raised is not None and 0 <= raised - t <= 60) for t in seams):
        return "seam"
    t_rec = onset
    if seams and onset >= seams[0]:  # (back onto the recording's clock: a copy begins at its cut)
        t_rec = start + onset - max(t for t in seams if t <= onset)
    if name in HOST_SHIFT and t_rec >= HOST_SHIFT[name] - 60:
        return "host"
    return "window" if any(0 <= t_rec - e <= 30 for e in ends) else "other"


def _ts(v) -> float:
    return v if isinstance(v, float) else datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()


def run(lines: list, cfg, arm: str, a) -> list[dict]:
    t0 = first_step_time(lines)
    wheres = [WHERE[i % len(WHERE)] if arm == "evidence" else None for i in range(a.pulses)]
    lines, spans = pulse_train(lines, wheres, t0 + a.at, a.ratio, a.on_s, a.off_s)
    pulses = [(start, end, where) for (start, end), where in zip(spans, wheres)]
    alerts = [x for x in replay(events(lines), cfg) if x.alertname == DRIFT]
    t_end = max(float(o["time"]) for o in lines)
    onsets = [o for x in alerts for o in _onsets(x)]
    out = []
    for k, (start, end, where) in enumerate(pulses):
        nxt = pulses[k + 1][0] if k + 1 < len(pulses) else t_end
        prev_end = pulses[k - 1][1] if k else -math.inf
        # a pulse's episodes: raised from its start to the next one's, with an onset after the
        # pulse before ended (an onset dated up to 30 s early counts: the change point of a
        # wandering host's medians is not exact; one dated before that is the episode before)
        # and no later than 30 s after this pulse's end: one dated after that is no change the
        # pulse made (on h200t_2gpu_m_sched_short, a +5.7% that nothing held, dated 69 s after the
        # backward pulse's end, was counted as its third episode), kept apart as raised between
        # pulses, as bench/pulses_live_report.py counts a live job's
        near = [o for o in onsets if o["raised"] is not None and start <= o["raised"] < nxt
                and o["onset"] >= max(prev_end, start - 60)]
        mine = [o for o in near if o["onset"] <= end + SLACK_S]
        between = [o for o in near if o["onset"] > end + SLACK_S]
        first = min(mine, key=lambda o: o["raised"], default=None)
        ends = [o["alert"].ends_at for o in mine]
        gone = None if not mine or any(e is None for e in ends) else round(max(_ts(e) for e in ends) - end, 1)
        out.append({"where": where or "none", "at_s": round(start - t0, 1), "ends_s": round(end - t0, 1),
                    "raised_s": None if first is None else round(first["raised"] - start, 1),
                    "further": None if first is None else first["further"],
                    "decided": None if first is None else first["decided"],
                    "episodes": len({id(o["alert"]) for o in mine}),
                    "own": _own(mine), "resolved_after_end_s": gone,
                    "summary": None if first is None else first["summary"][:300],
                    "between": [{"rank": o["alert"].rank, "onset_after_end_s": round(o["onset"] - end, 1),
                                 "raised_after_end_s": round(o["raised"] - end, 1), "decided": o["decided"],
                                 "summary": o["summary"][:200]} for o in between]})
    return out


def _own(mine: list[dict]) -> bool:
    """The pulse has an episode of its own on every rank that raised it: one episode per rank,
    opened by this pulse (its first onset is the episode's first, not a further change folded
    into an episode that an earlier pulse opened). A 2-GPU job's two ranks raising one episode
    each is two episodes of their own, not a split."""
    ranks: dict = {}
    for o in mine:
        if o["raised"] is not None:
            ranks.setdefault(o["alert"].rank, set()).add(id(o["alert"]))
    firsts = {}
    for o in sorted(mine, key=lambda o: o["raised"] or 0.0):
        firsts.setdefault(o["alert"].rank, o)
    return bool(ranks) and all(len(v) == 1 for v in ranks.values()) and not any(o["further"] for o in firsts.values())


def _onsets(x) -> list[dict]:
    """Each onset of an alert episode (its first, then each further change) with the time it
    was raised: the first when the episode fired, a further one when it superseded the one
    before (``earlier``'s ``until``)."""
    if not x.fired_at:
        return []
    steps = [(e["onset_at"], e["raised"]) for e in x.earlier] + [(x.onset, x.onset_raised[1])]
    raised = [x.fired_at] + [_ts(e["until"]) for e in x.earlier]
    return [{"alert": x, "onset": _ts(on), "raised": r, "further": i > 0, "summary": text or x.summary,
             "decided": x.decided if i == len(steps) - 1 else ("job" if "a change of the job" in (text or "") else "steps")}
            for i, ((on, text), r) in enumerate(zip(steps, raised))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recordings", nargs="*", default=None)
    p.add_argument("--at", type=float, default=240.0)
    p.add_argument("--pulses", type=int, default=4)
    p.add_argument("--on-s", type=float, default=90.0)
    p.add_argument("--off-s", type=float, default=140.0)
    p.add_argument("--ratio", type=float, default=0.10)
    p.add_argument("--target-s", type=float, default=60.0)
    p.add_argument("--arms", nargs="*", default=["evidence", "none"])
    p.add_argument("--detection", default=None)
    p.add_argument("--out")
    p.add_argument("--md")
    a = p.parse_args()
    cfg = parse_detection(a.detection)
    paths = a.recordings or [os.path.join(REAL, n) for n in sorted(os.listdir(REAL)) if n.endswith(".jsonl.gz")]
    paths = [x for x in paths if _has_phases(x)]
    need = a.at + a.pulses * (a.on_s + a.off_s) + 60
    doc = {"command": " ".join(["python", "bench/evidence_pulses.py"] + sys.argv[1:]),
           "python": sys.version.split()[0], "date": datetime.date.today().isoformat(), "recordings": []}
    for path in paths:
        name = os.path.basename(path)
        base = load(path)
        span = max(float(o["time"]) for o in base) - first_step_time(base)
        times = max(1, int(need // max(span - 180, 1)) + 1) if span < need else 1
        lines = repeat(base, times, match=times > 1)
        healthy = [x for x in replay(events(lines), cfg) if x.alertname == DRIFT]
        marks = landmarks(lines, base, times)
        rec = {"name": name, "held_out": name in HELD_OUT, "repeat": times,
               "false_episodes": [{"rank": x.rank, "severity": x.severity, "decided": x.decided,
                                   "where": classify(_ts(x.onset), name, marks,
                                                     _ts(x.fired_at) if x.fired_at else None),
                                   "since_s": round(_ts(x.starts_at) - first_step_time(lines), 1),
                                   "summary": (x.fired_summary or x.summary)[:200]} for x in healthy],
               "arms": {arm: run(lines, cfg, arm, a) for arm in a.arms}}
        doc["recordings"].append(rec)
        print(name, "false", len(rec["false_episodes"]),
              {arm: [(r["where"], r["raised_s"], r["decided"], r["episodes"], r["resolved_after_end_s"])
                     for r in runs] for arm, runs in rec["arms"].items()}, flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(doc, fh, indent=1)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(markdown(doc, a))


def markdown(doc: dict, a) -> str:
    rows = [f"# Changes that come back, with and without evidence\n\n`{doc['command']}` (Python "
            f"{doc['python']}, {doc['date']}). {a.pulses} pulses of +{a.ratio:.0%} per recording, "
            f"{a.on_s:.0f} s on / {a.off_s:.0f} s off from {a.at:.0f} s; cells per pulse: where the time "
            f"went, seconds from its start to the raise (- not raised), how it was decided, episodes, "
            f"seconds from its end to the resolve.\n",
            "| recording | held out | false episodes | " + " | ".join(a.arms) + " |",
            "|---|---|---:|" + "---|" * len(a.arms)]
    for r in doc["recordings"]:
        cells = []
        for arm in a.arms:
            cells.append("<br>".join(f"{x['where']}: {x['raised_s'] if x['raised_s'] is not None else '-'} s "
                                     f"{x['decided'] or ''} x{x['episodes']} gone {x['resolved_after_end_s']}"
                                     for x in r["arms"][arm]))
        rows.append(f"| {r['name']} | {'yes' if r['held_out'] else 'no'} | {_split(r['false_episodes'])} | "
                    + " | ".join(cells) + " |")
    rows += ["", "Totals (raised within the target; own episode: one episode on each rank that raised "
             "it, opened by this pulse, not folded into an earlier one; resolved within 2 minutes of its end):", "", "| part | arm | pulses | within target | own episode | resolved <= 120 s | false episodes | raised between pulses |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for part, held in (("held out", True), ("tuning", False)):
        recs = [r for r in doc["recordings"] if r["held_out"] == held]
        if not recs:
            continue
        for arm in a.arms:
            xs = [x for r in recs for x in r["arms"][arm]]
            ok = [x for x in xs if x["raised_s"] is not None and x["raised_s"] <= a.target_s]
            rows.append(f"| {part} | {arm} | {len(xs)} | {len(ok)} | {sum(1 for x in xs if x.get('own'))} | "
                        f"{sum(1 for x in xs if x['resolved_after_end_s'] is not None and x['resolved_after_end_s'] <= 120)} | "
                        f"{_split([e for r in recs for e in r['false_episodes']])} | "
                        f"{sum(len(x.get('between', ())) for x in xs)} |")
    rows += ["", "False episodes: all of them, then (where they start, `classify`) at a seam of the "
             "repetition / at or after the recording's real host change / within 30 s after a "
             "recorded profiler window / elsewhere. Raised between pulses: an onset more than "
             f"{SLACK_S:.0f} s after a pulse's end, raised before the next pulse began (no change the pulse "
             "made; on the played recording with its pulses, as a live job's raises between its causes)."]
    return "\n".join(rows) + "\n"


def _split(episodes: list) -> str:
    """'N (seam a, host b, window c, other d)' for false episodes, or '0'."""
    if not episodes:
        return "0"
    kinds = ("seam", "host", "window", "other")
    return f"{len(episodes)} (" + ", ".join(f"{k} {sum(1 for e in episodes if e.get('where') == k)}" for k in kinds) + ")"


if __name__ == "__main__":
    main()
