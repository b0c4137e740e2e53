"""Real recordings as test material: load a collector record file (``--record``) as JSON
objects, play it several times in a row as one longer job (:func:`repeat`, cut where its levels
match so that no seam is a larger step than the job's own), and inject a change into its real
step series, or read the drift reach part-way, or one rank's steps and its profiler sessions
with the step time around them. Used by bench/detection_real.py, bench/detection_reach_real.py,
bench/aftereffect_real.py, bench/window_arms_real.py, tests/collector/detect/test_real_corpus.py and
tests/_aftereffect_verdict.py.

An injected change multiplies a step's duration by the change at its end time, and every later
time of that rank (steps, their sampled phase times, samples, the collector's clock) moves by
the time added, so the series stays a consistent job.
"""

from __future__ import annotations

import collections
import gzip
import json
import math
import statistics
from typing import Iterable, Optional

from ..ingest import record_events

__all__ = ["load", "first_step_time", "rank_steps", "inject", "slow_loader", "grow", "repeat", "matched_cut", "pulse_end", "pulses", "rerun",
           "events", "reach_at"]


def load(path: str) -> list[dict]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def first_step_time(lines: list[dict]) -> float:
    return min(float(s["end_time_s"]) - float(s["duration_s"]) for o in lines if o["kind"] == "batch"
               for s in o["batch"].get("steps", ())[:1])


def rank_steps(lines: list[dict], rank: int = 0) -> dict[int, tuple[float, bool]]:
    """``{step: (end time, profiled)}`` of one rank's steps."""
    return {int(s["step"]): (float(s["end_time_s"]), bool(s.get("profiled")))
            for o in lines if o["kind"] == "batch" and int(o.get("rank", 0)) == rank
            for s in o["batch"].get("steps", ())}


def runs(steps: Iterable[int]) -> list[tuple[int, int]]:
    """(first, last) of each run of consecutive numbers (a rank's profiled steps: its sessions)."""
    out: list = []
    for k in sorted(steps):
        if out and out[-1][1] == k - 1:
            out[-1][1] = k
        else:
            out.append([k, k])
    return [tuple(r) for r in out]


def around(step_s: list, first: int, last: int, before: int, gap: int, after: int,
           min_before: Optional[int] = None) -> Optional[float]:
    """Median of the ``after`` steps from ``gap`` past step ``last`` over the median of the
    ``before`` steps ending at step ``first`` (1-based: step k is ``step_s[k - 1]``); None where
    the clock holds fewer than ``after`` of the one or ``min_before`` (default all) of the other."""
    b = step_s[max(0, first - 1 - before):first - 1]
    a = step_s[last + gap:last + gap + after]
    if len(b) < (before if min_before is None else min_before) or len(a) < after:
        return None
    return statistics.median(a) / statistics.median(b)


def inject(lines: list[dict], kind: str, ratio: float, at: float, span: float,
           where: Optional[str] = None) -> list[dict]:
    """A copy of ``lines`` with the change applied to every rank's steps from Unix time ``at``:
    ``step`` +ratio to the end; ``ramp`` rising to +ratio over ``span`` seconds, then held;
    ``pulse`` +ratio for ``span`` seconds of the original recording's time, then back.
    ``where``: what the time added is made of, as the agent measures it: a phase's name
    (:data:`PHASES`: the sampled steps' device time of that phase grows by it), a phase's name
    with "+host" (its device time and its host time grow by it: work on the device that the host
    waits for inside the phase, as GEMMs added to a live launch-bound H100 job's backward did,
    tests/data/real/diag/h100z), "loader" (the data-loader wait grows by it), or None (nothing
    but the step time: the host's own pace)."""
    if kind not in ("step", "ramp", "pulse"):
        raise ValueError(f"inject: kind must be step, ramp or pulse, not {kind!r}")
    waited = where is not None and where.endswith("+host") and where[:-5] in PHASES
    if where not in (None, "loader", *PHASES) and not waited:
        raise ValueError(f"inject: where must be None, 'loader', one of {PHASES} or one of them with "
                         f"'+host', not {where!r}")
    phase = where[:-5] if waited else where if where in PHASES else None

    def added(rank: int, end: float, dur: float) -> tuple[float, float]:
        if end < at or (kind == "pulse" and end >= at + span):
            return 0.0, 0.0
        factor = 1.0 + (ratio if kind != "ramp" else ratio * min(1.0, (end - at) / span))
        more = dur * (factor - 1.0)
        return more, more if where == "loader" else 0.0

    return _stretch(lines, added, phase, idle=phase is None, host=waited)


def pulse_end(lines: list[dict], at: float, span: float, ratio: float) -> float:
    """Where :func:`inject`'s ``pulse`` of +``ratio`` from ``at`` for ``span`` s of the recording's
    time ends in the changed series: ``at + span`` moved by what the pulse added to rank 0's steps."""
    return at + span + ratio * sum(float(s["duration_s"]) for o in lines if o["kind"] == "batch"
                                   and int(o.get("rank", 0)) == 0 for s in o["batch"].get("steps", ())
                                   if at <= float(s["end_time_s"]) < at + span)


def pulses(lines: list[dict], where_each: Iterable[Optional[str]], at: float, ratio: float = 0.10,
           on_s: float = 90.0, off_s: float = 140.0) -> tuple[list[dict], list[tuple[float, float]]]:
    """``lines`` with one :func:`inject` ``pulse`` of +``ratio`` per entry of ``where_each`` (what
    its time is made of, as :func:`inject`'s ``where``), the first from Unix time ``at``, each on
    ``on_s`` and off ``off_s`` of the recording's time after it ends; the changed series and each
    pulse's (start, end) in it (:func:`pulse_end`)."""
    spans = []
    for where in where_each:
        lines = inject(lines, "pulse", ratio, at, on_s, where)
        spans.append((at, pulse_end(lines, at, on_s, ratio)))
        at = spans[-1][1] + off_s
    return lines, spans


def slow_loader(lines: list[dict], rank: int, seconds: float, at: float) -> list[dict]:
    """A copy of ``lines`` in which ``rank``'s data loader takes ``seconds`` longer per step
    from Unix time ``at``, in a job whose ranks run in lockstep (DDP): every rank's step
    grows by ``seconds`` (the others wait in the collective), and ``rank``'s data-loader wait
    grows by it too; later times move by the time added, as in :func:`inject`."""

    def added(r: int, end: float, dur: float) -> tuple[float, float]:
        if end < at:
            return 0.0, 0.0
        return seconds, seconds if r == rank else 0.0

    return _stretch(lines, added)


PHASES = ("data", "forward", "backward", "sync", "optimizer")


def _stretch(lines: list[dict], added, phase: Optional[str] = None, idle: bool = False,
             host: bool = False) -> list[dict]:
    """A copy of ``lines`` whose steps take ``added(rank, end_time_s, duration_s)`` =
    (seconds longer, of which data-loader wait) each; every later time of that rank (steps,
    samples, the collector's clock) moves by the time added so far. ``phase``: the sampled
    steps' device time of that phase grows by their step's time added (a sample that comes in
    an earlier batch than its step, at a batch's edge, stays as it was), and with ``host`` its
    host time too. ``idle``: the time added
    is the GPU's idle time (no work added: the host's pace, a loader): the NVML samples' activity
    ratios after a step that grew fall by its share (the same busy time in a longer step)."""
    extra: dict[int, float] = {}  # rank -> seconds added so far
    moved: dict[int, dict[int, float]] = collections.defaultdict(dict)  # rank -> step -> its step's move
    grown: dict[int, dict[int, float]] = collections.defaultdict(dict)  # rank -> step -> seconds added
    busy: dict[int, float] = {}  # rank -> the last step's duration before / after (idle: activity scale)
    out = []
    for o in lines:
        if o["kind"] != "batch":
            out.append(o)
            continue
        rank = int(o.get("rank", 0))
        add = extra.get(rank, 0.0)
        b = dict(o["batch"])
        steps = []
        for s in b.get("steps", ()):
            s = dict(s)
            end, dur = float(s["end_time_s"]), float(s["duration_s"])
            more, wait = added(rank, end, dur)
            add += more
            busy[rank] = dur / (dur + more) if idle and dur + more > 0 else 1.0
            s["duration_s"], s["end_time_s"] = dur + more, end + add
            moved[rank][int(s["step"])] = add
            if phase and more:
                grown[rank][int(s["step"])] = more
            if wait:
                s["dataloader_wait_s"] = float(s.get("dataloader_wait_s", 0.0)) + wait
            steps.append(s)
        if steps:
            b["steps"] = steps
        for key in ("gpu_samples", "host", "allocator"):
            if b.get(key):
                b[key] = [dict(x, time_s=float(x.get("time_s", 0)) + add) for x in b[key]]
        if idle and busy.get(rank, 1.0) != 1.0 and b.get("gpu_samples"):
            f = busy[rank]
            b["gpu_samples"] = [dict(x, **{k: float(v) * f for k, v in x.items() if k.endswith("_active_ratio")})
                                for x in b["gpu_samples"]]
        if b.get("phase_times"):  # sampled steps (of this batch or an earlier one): moved as their step
            b["phase_times"] = [_grown_phase(dict(x, end_time_s=float(x["end_time_s"])
                                                  + moved[rank].get(int(x["step"]), add)),
                                             phase, grown[rank].get(int(x["step"]), 0.0), host)
                                for x in b["phase_times"]]
        if "sealed_time_s" in b:
            b["sealed_time_s"] = float(b["sealed_time_s"]) + add
        extra[rank] = add
        out.append(dict(o, batch=b, time=float(o["time"]) + add))
    return out


def _grown_phase(x: dict, phase: Optional[str], more: float, host: bool = False) -> dict:
    if phase and more:
        x[f"{phase}_s"] = float(x.get(f"{phase}_s", 0.0)) + more
        if host and f"host_{phase}_s" in x:
            x[f"host_{phase}_s"] = float(x[f"host_{phase}_s"]) + more
    return x


_GROWN = {"allocator": ("allocated_bytes", "reserved_bytes", "active_bytes"), "gpu_samples": ("memory_used_bytes",)}


def grow(lines: list[dict], bytes_per_s: float, at: float) -> list[dict]:
    """A copy of ``lines`` whose GPU memory grows by ``bytes_per_s`` from Unix time ``at`` on
    every rank: the allocator's allocated, reserved and active bytes and NVML's used bytes of
    each sample at time t >= ``at`` rise by ``bytes_per_s`` x (t - at), on top of the real
    series (a leak of tensors kept alive: the caching allocator reserves what it allocates)."""
    out = []
    for o in lines:
        b = o.get("batch") if o["kind"] == "batch" else None
        if not b or not any(b.get(key) for key in _GROWN):
            out.append(o)
            continue
        b = dict(b)
        for key, fields in _GROWN.items():
            if b.get(key):
                b[key] = [_grown(x, fields, bytes_per_s * (float(x.get("time_s", 0)) - at)) for x in b[key]]
        out.append(dict(o, batch=b))
    return out


def _grown(sample: dict, fields: tuple, more: float) -> dict:
    if more <= 0:
        return sample
    return dict(sample, **{f: str(int(int(sample[f]) + more)) for f in fields if f in sample})


def repeat(lines: list[dict], times: int, match: bool = False) -> list[dict]:
    """The recording played ``times`` times in a row as one longer job (the same sessions; the
    copies after the first leave out the first three minutes (warm-up) and follow on without a
    gap: each copy's times moved so that its first batch comes 1 s after the copy before it
    ended, its step numbers by the recording's last step): real noise for changes longer than
    one recording (ramps over 15 and 30 minutes, an hour). A seam joins the recording's end to
    its third minute, so a level that differs between those is a step in the longer job.
    ``match``: the recording is cut at a start (from three minutes) and an end (in its last three
    minutes) where the job's level is the closest (:func:`matched_cut`), so a seam is no larger a
    step than the job's own over 30 s."""
    if times <= 1:
        return lines
    # copies after the first leave out the job's first three minutes (its warm-up would be a
    # restart in the middle of the longer job, not noise)
    start, stop = matched_cut(lines) if match else (first_step_time(lines) + 180.0, math.inf)
    if match:  # the recording ends at the cut too, and its copies with it
        lines = [o for o in lines if o["kind"] != "batch" or float(o["time"]) < stop]
    t_last = max(float(o["time"]) for o in lines if o["kind"] == "batch")
    last = max(int(s["step"]) for o in lines if o["kind"] == "batch" for s in o["batch"].get("steps", ()))
    body = [o for o in lines if o["kind"] == "batch" and float(o["time"]) >= start]
    if not body:  # a recording of three minutes or less is played once
        return lines
    # one copy's body and the second to the next, over batch times and step end times both
    # (a batch's steps end up to its flush interval before it is sent)
    ends = [float(st["end_time_s"]) for o in lines if o["kind"] == "batch" for st in o["batch"].get("steps", ())]
    body_ends = [float(st["end_time_s"]) for o in body for st in o["batch"].get("steps", ())]
    span = max([t_last, *ends]) - min([*(float(o["time"]) for o in body), *body_ends]) + 1.0
    seq = max(int(o["batch"].get("seq", 0)) for o in body)
    out = [o for o in lines if o["kind"] != "disconnect"]
    for k in range(1, times):
        dt = k * span
        for o in body:
            b = dict(o["batch"], seq=str(int(o["batch"].get("seq", 0)) + k * seq))
            if b.get("steps"):
                b["steps"] = [dict(s, step=str(int(s["step"]) + k * last),
                                   end_time_s=float(s["end_time_s"]) + dt) for s in b["steps"]]
            for key in ("gpu_samples", "host", "allocator"):
                if b.get(key):
                    b[key] = [dict(x, time_s=float(x.get("time_s", 0)) + dt) for x in b[key]]
            if b.get("phase_times"):
                b["phase_times"] = [dict(x, step=str(int(x["step"]) + k * last), end_time_s=float(x["end_time_s"]) + dt)
                                    for x in b["phase_times"]]
            for key in ("windows",):
                b.pop(key, None)
            out.append(dict(o, batch=b, time=float(o["time"]) + dt))
    out += [dict(o, time=float(o["time"]) + (times - 1) * span) for o in lines if o["kind"] == "disconnect"]
    return out


_MATCH_S = 30.0  # the level either side of a seam: the median and 10th percentile of this long


def matched_cut(lines: list[dict], earliest_s: float = 180.0, body_s: float = 300.0,
                end_within_s: float = 180.0) -> tuple[float, float]:
    """(start, end) Unix times for :func:`repeat`'s copies: the start from ``earliest_s`` after
    the first step, the end within ``end_within_s`` of the last, at least ``body_s`` apart, on a
    5 s grid, where rank 0's 30 s of steps after the start are closest to its 30 s before the
    end: the larger of the relative differences of their medians and of their 10th percentiles
    (what the drift detector's two summaries see) is the least (the latest end, then the
    earliest start, of equals)."""
    steps = sorted((float(s["end_time_s"]), float(s["duration_s"])) for o in lines
                   if o["kind"] == "batch" and int(o.get("rank", 0)) == 0 for s in o["batch"].get("steps", ()))
    t0, t_end = first_step_time(lines), steps[-1][0]

    def level(a: float, b: float) -> Optional[tuple[float, float]]:
        ds = sorted(d for e, d in steps if a <= e < b)
        return (statistics.median(ds), ds[len(ds) // 10]) if len(ds) >= 10 else None

    starts = [(t, level(t, t + _MATCH_S)) for t in _grid(t0 + earliest_s, t_end - body_s)]
    ends = [(t, level(t - _MATCH_S, t)) for t in _grid(max(t0 + earliest_s + body_s, t_end - end_within_s), t_end)]
    best, cut = math.inf, (t0 + earliest_s, t_end + 1.0)
    for end, after in sorted(ends, key=lambda x: -x[0]):
        for start, before in starts:
            if after is None or before is None or end - start < body_s:
                continue
            score = max(abs(before[0] / after[0] - 1), abs(before[1] / after[1] - 1))
            if score < best:
                best, cut = score, (start, end)
    return cut


def _grid(a: float, b: float, every: float = 5.0) -> list[float]:
    return [a + every * k for k in range(int((b - a) // every) + 1)] if b >= a else []


def seams(lines: list[dict]) -> list[float]:
    """Where :func:`repeat`'s copies join: rank 0's step end times where its step number jumps
    (the copies leave out the warm-up's steps; no recording in tests/data/real jumps as recorded)."""
    steps = sorted(rank_steps(lines).items())
    return [b[1][0] for a, b in zip(steps, steps[1:]) if b[0] - a[0] > 1]


def rerun(lines: list[dict], start: float, session: str, **hello) -> list[dict]:
    """The recording as another run of its job (a restart, a resume): every time moved so that
    its first event is at Unix time ``start``, its sessions replaced by ``session`` (rank r's by
    ``session-r`` where there are several ranks) and its Hello's fields by ``hello`` (``host=``,
    ``torch_version=``, ``config=``...: a config is merged into the recorded one). Its windows
    and trace references are left out (their times are text)."""
    t0 = min(float(o["time"]) for o in lines)
    dt = start - t0
    ranks = {int(o.get("rank", o.get("hello", {}).get("rank", 0))) for o in lines}

    def sid(rank: int) -> str:
        return session if len(ranks) == 1 else f"{session}-{rank}"

    out = []
    for o in lines:
        o = dict(o, time=float(o["time"]) + dt)
        if "hello" in o:
            h = dict(o["hello"], **{k: v for k, v in hello.items() if k != "config"})
            h["config"] = dict(o["hello"].get("config", {}), **hello.get("config", {}))
            h["session_id"] = sid(int(h.get("rank", 0)))
            h["attach_time_s"] = float(h.get("attach_time_s", t0)) + dt
            o["hello"] = h
        if "session" in o:
            o["session"] = sid(int(o.get("rank", 0)))
        if "job" in o and "job" in hello:
            o["job"] = hello["job"]
        if o["kind"] == "batch":
            b = {k: v for k, v in o["batch"].items() if k not in ("windows", "traces")}
            if b.get("steps"):
                b["steps"] = [dict(x, end_time_s=float(x["end_time_s"]) + dt) for x in b["steps"]]
            if b.get("phase_times"):
                b["phase_times"] = [dict(x, end_time_s=float(x["end_time_s"]) + dt) for x in b["phase_times"]]
            for key in ("gpu_samples", "host", "allocator", "events"):
                if b.get(key):
                    b[key] = [dict(x, time_s=float(x.get("time_s", 0)) + dt) for x in b[key]]
            if "sealed_time_s" in b:
                b["sealed_time_s"] = float(b["sealed_time_s"]) + dt
            o["batch"] = b
        out.append(o)
    return out


def events(lines: list[dict]):
    """The record events of ``lines`` (a recording's parsed lines, as :func:`load` gives them)."""
    return record_events(enumerate(lines, 1))


def reach_at(lines: list[dict], at: float) -> dict:
    """``{(job, rank): {severity: ratio}}``: each armed rank's drift reach after the recording
    up to Unix time ``at``, replayed at the default detection settings."""
    from .._replay import replay
    from ..alerting import Detection
    from ..detect import DetectionConfig
    cfg = DetectionConfig()
    detection = Detection(cfg, log_changes=False)
    replay(events([ln for ln in lines if ln.get("time", 0.0) <= at]), cfg, detection=detection)
    return detection.engine.reach()
