"""The ``/api/jobs`` and ``/api/steps`` JSON documents, built from a state snapshot (any thread)."""

from __future__ import annotations

import collections.abc
import contextlib
import gc
import json
import math
import threading
import time
from typing import Any, Callable, Mapping, Optional

from ..detect import DriftView
from ..state import CollectorState, RankState
from ..state import no_pause

__all__ = ["SharedRender", "jobs_document", "jobs_json", "jobs_summary", "jobs_summary_json", "steps_document", "steps_json"]


def _fields(msg: Any) -> Optional[dict[str, Any]]:
    """Scalar fields of a flat protobuf message; absent optional fields are left out."""
    if msg is None:
        return None
    return {f.name: _plain(getattr(msg, f.name)) for f in msg.DESCRIPTOR.fields
            if not f.has_presence or msg.HasField(f.name)}


def _plain(value: Any) -> Any:
    """A scalar map becomes a dict, a repeated scalar a list (their containers are not JSON)."""
    if isinstance(value, collections.abc.Mapping):
        return dict(value)
    if isinstance(value, collections.abc.Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    return value


# Why the agent's profiler windows run as they do, by its ``windows`` setting (its Hello's
# config), with the figures behind the default (docs/agent.md has the measurements).
_WINDOWS_WHY = {
    "on_demand": "profiler windows run only when a slowdown alert or a person asks: any profiler session "
                 "left 1-GPU H100 jobs about 1% slower for the rest of the process (scheduled windows +1.22% "
                 "and +1.35%, SE 0.33-0.45%; the warm-up session alone +0.94%; no session +0.24%; "
                 "bench/results/agent_ab_h100w.md, agent_ab_h100l.md), and on an H200 launch-bound job "
                 "sessions whose trace was exported were followed by +8% (median of 7; not resolved from the "
                 "host's wander, bench/results/session_residue_h200.md; on a 40 ms H200 job, 24 fresh processes: "
                 "the level after one exported session 1.001 of before, SE 0.006, CPU-only windows 1.008, SE "
                 "0.004, agent_ab_h200wc.md; on a launch-bound H200 job, one session 1.05-1.10 against 0.90-1.20 "
                 "where none ran: not resolved, real_h200zj.md); a cpu+cuda or CPU-only window also costs ~0.2 s beyond its "
                 "steps (0.3% at the 60-s interval); the agent's 0.5% budget holds only "
                 "without them (H200 at the defaults: +0.14%)",
    "scheduled": "profiler windows on the schedule (windows: scheduled): their cost, and a lasting after-effect "
                 "once the agent's own check finds one, is in agent_stats.overhead_ratio; about 1% of step time "
                 "was measured on H100 (docs/agent.md)",
    "off": "no profiler windows (windows: off); captures asked for still run",
}


def _windows(config: Mapping[str, str]) -> Optional[dict]:
    mode = {"True": "scheduled", "true": "scheduled", "1": "scheduled", "False": "off", "false": "off",
            "0": "off"}.get(config.get("windows", ""), config.get("windows", ""))
    return {"mode": mode, "why": _WINDOWS_WHY[mode]} if mode in _WINDOWS_WHY else None


_NO_DRIFT = DriftView()


def _rank(st: RankState, events: bool, drift: Optional[DriftView] = None) -> dict[str, Any]:
    h = st.hello
    d = drift or _NO_DRIFT
    arming = d.arming
    out = {
        "rank": st.rank, "local_rank": h.local_rank, "world_size": h.world_size, "host": h.host,
        "pid": h.pid, "session_id": h.session_id, "gpu": _fields(st.gpu),
        "versions": {"agent": h.agent_version, "torch": h.torch_version, "cuda": h.cuda_version,
                     "driver": h.driver_version},
        "connected": st.connected, "last_seen": st.last_seen, "disconnected_at": st.disconnected_at,
        "steps_total": st.steps_total, "last_step_time": st.last_step_time,
        # the collector's clock at the rank's last batch minus its last step's time: its batching
        # delay (seconds), or the agent host's clock off by that much (an hour: a clock that jumped)
        "clock_lag_s": (round(st.last_seen - st.last_step_time, 3)
                        if st.last_seen is not None and st.last_step_time is not None else None),
        "step_median_s": st.recent_median,
        "samples_total": st.samples_total if st.samples_known else None,
        "tokens_total": st.tokens_total if st.tokens_known else None,
        "dataloader_wait_ratio": st.dataloader_wait_ratio,
        "allocator": _fields(st.allocator), "gpu_sample": _fields(st.gpu_sample), "host_sample": _fields(st.host),
        "agent_stats": _fields(st.stats), "event_counts": dict(st.event_counts),
        "drift_armed": d.armed,
        "drift_reach": dict(d.reach) if d.reach else None,
        "drift_level_s": d.level_s,
        "drift_settling_again_since": d.settling_again_since,
        "drift_armed_at": arming[0] if arming else None,
        "drift_armed_in_s": max(0.0, arming[0] - arming[1]) if arming else None,
        "windows": _windows(h.config),
    }
    if events:
        out["events"] = [_fields(ev) for ev in st.events]
    return out


def jobs_document(state: CollectorState, job: Optional[str] = None,
                  drift: Optional[Mapping[tuple, DriftView]] = None) -> dict[str, Any]:
    """``{"jobs": [{"job": name, "ranks": [rank, ...]}]}``, jobs and ranks sorted.

    Every job: each rank's identity, counters, latest samples, ``step_median_s`` (the median
    of its last 100 steps) and, from ``drift`` (:class:`DriftView` by (job, rank)),
    ``drift_armed`` (whether the rank's drift detector has its settled level and judges; false
    while it warms up and settles, None where detection does not know the rank or is off),
    ``drift_reach`` (once armed, the smallest sustained step-time shift each severity can raise
    at the rank's own noise, as a ratio, ``{"critical": 0.08, "warning": 0.04, "info": 0.021}``,
    each over its window ``detection.drift.*_window_s``; None before), ``drift_level_s`` (the
    settled seconds per step it is judged against), ``drift_settling_again_since`` (while the
    rank settles again because a shift found after arming began inside its settling time, that
    shift's onset as Unix time) and ``drift_armed_at`` / ``drift_armed_in_s`` (before arming),
    copied without its step
    lists and events (a fleet of 10,000 ranks holds 500,000 event messages). One
    ``job``: that job's ranks only, with their last events."""
    jobs: dict[str, list] = {}
    for st in state.snapshot(light=job is None, job=job, median=True):
        jobs.setdefault(st.job, []).append(_rank(st, events=job is not None,
                                                 drift=(drift or {}).get((st.job, st.rank))))
    return {"jobs": [{"job": name, "ranks": ranks} for name, ranks in jobs.items()]}


def jobs_summary(state: CollectorState, pause: Callable[[], None] = no_pause,
                 runs: Optional[Callable[[str], Optional[dict]]] = None) -> dict[str, Any]:
    """``{"jobs": [{"job", "ranks", "connected", "step_median_s", "slowest_rank",
    "slowest_step_median_s", "run"}]}``, jobs sorted: one line per job, however many ranks it has
    (the page's fleet overview; ``/api/jobs?job=NAME`` gives one job's ranks). ``step_median_s``
    is the median of the ranks' step medians, the slowest rank the one with the largest; both
    None before a rank has steps. ``run``: ``runs(job)``, the live run against the job's run
    before it (detect's ``Lineage.summary``), None without one."""
    jobs: dict[str, list] = {}
    for st in state.snapshot(light=True, median=True, pause=pause):
        row = jobs.setdefault(st.job, [0, 0, []])
        row[0] += 1
        row[1] += bool(st.connected)
        if st.recent_median is not None and math.isfinite(st.recent_median):
            row[2].append((st.recent_median, st.rank))
    out = []
    for name, (ranks, connected, medians) in jobs.items():
        medians.sort()
        out.append({"job": name, "ranks": ranks, "connected": connected,
                    "step_median_s": medians[len(medians) // 2][0] if medians else None,
                    "slowest_rank": medians[-1][1] if medians else None,
                    "slowest_step_median_s": medians[-1][0] if medians else None,
                    "run": runs(name) if runs is not None else None})
    return {"jobs": out}


@contextlib.contextmanager
def _gc_paused():
    """No automatic garbage collection while a large answer is built: its tens of thousands of
    short-lived dicts (freed by their reference counts, no cycles) otherwise set off full
    collections of the whole state, each holding ingest and acks (10,000 ranks, one core: 56-79
    full collections in 60 s with /api/jobs polled, none unpolled; collector_scale_polled.md).
    Explicit collections (``_gcstats.GcFreezer``) still run. Process-wide: callers are serial
    (one lock)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class SharedRender:
    """One slow answer shared by the requests that come while it is fresh: an answer that took
    ``t`` seconds to build, ``t`` at least ``slow_s``, is served again for ``share * t`` seconds
    (monotonic clock); a faster one is built for every request. However often the whole fleet's
    ``/api/jobs`` is polled, building it then takes at most 1 / (1 + share) of the core the
    collector's ingest also needs (a quarter with ``share`` 3). At 10,000 ranks (21 MB, 4.7 s on
    a lent H100 host's core) an answer is up to 14 s old; the agents' batches come every 20 s
    at that size. Small fleets (a few ms to build) always get a fresh answer. Thread-safe."""

    def __init__(self, share: float = 3.0, slow_s: float = 0.1, clock=time.monotonic):
        self.share, self.slow_s, self._clock = share, slow_s, clock
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[float, bytes]] = {}  # key -> (fresh until, body)
        self.renders = 0

    def get(self, key: str, render) -> bytes:
        with self._lock:
            now = self._clock()
            kept = self._kept.get(key)
            if kept is not None and now < kept[0]:
                return kept[1]
            with _gc_paused():
                body = render()
            took = self._clock() - now
            self.renders += 1
            if took >= self.slow_s:
                self._kept[key] = (self._clock() + self.share * took, body)
            else:
                self._kept.pop(key, None)
            return body


def _finite(value: Any) -> Any:
    """Replace NaN/Infinity (from a broken agent) by None: they are not valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


_ENCODE_RANKS = 64  # ranks per json.dumps call of a jobs answer


def jobs_json(state: CollectorState, job: Optional[str] = None,
              drift: Optional[Mapping[tuple, DriftView]] = None, chunk: Optional[int] = None,
              pause: Callable[[], None] = no_pause) -> bytes:
    """:func:`jobs_document` as JSON, the same bytes as one ``json.dumps`` of it, built and
    encoded ``_ENCODE_RANKS`` ranks at a time from a snapshot taken a chunk at a time
    (:meth:`CollectorState.snapshot_chunks`; ``chunk`` ranks, its default when None): the C
    encoder holds the GIL for the whole of one call (the whole fleet's 21 MB in one call held
    ingest and acks for it), and the whole document of 10,000 ranks alive at once is hundreds
    of thousands of young objects for the event loop's young-generation collection to walk
    (80-120 ms each time it is built whole; collector_scale_polled.md). Only the encoded text is
    kept. ``pause()`` is called after each chunk (a :class:`~..state._yield.ScrapeYield`'s: the
    build gives way to a busy ingest as a scrape does)."""
    drift = drift or {}
    parts: list[str] = []
    pending: list[dict] = []  # ranks of the current job not yet encoded
    current: Optional[str] = None
    ranks_out = 0  # ranks of the current job already encoded

    def encode() -> None:
        nonlocal ranks_out
        if pending:
            text = json.dumps(_finite(pending), allow_nan=False)
            parts.append((", " if ranks_out else "") + text[1:-1])
            ranks_out += len(pending)
            pending.clear()

    kwargs = {} if chunk is None else {"chunk": chunk}
    for copies in state.snapshot_chunks(light=job is None, job=job, median=True, **kwargs):
        pause()
        for st in copies:
            if st.job != current:
                encode()
                if current is not None:
                    parts.append("]}")
                parts.append(f'{", " if current is not None else ""}{{"job": {json.dumps(st.job)}, "ranks": [')
                current, ranks_out = st.job, 0
            pending.append(_rank(st, events=job is not None, drift=drift.get((st.job, st.rank))))
            if len(pending) >= _ENCODE_RANKS:
                encode()
    encode()
    if current is not None:
        parts.append("]}")
    return ('{"jobs": [' + "".join(parts) + "]}").encode()


def jobs_summary_json(state: CollectorState, pause: Callable[[], None] = no_pause,
                      runs: Optional[Callable[[str], Optional[dict]]] = None) -> bytes:
    return json.dumps(_finite(jobs_summary(state, pause, runs)), allow_nan=False).encode()


def runs_json(runs: list, job: str) -> tuple[int, bytes]:
    """``/api/jobs/<job>/runs``: ``(200, {"job", "runs": [...]})``, oldest first, the live run
    last with ``"live": true`` (detect's ``Lineage.runs``); an empty list for a job with no run
    recorded (the page asks for every job it draws, and a 404 would be a console error). With
    ``?ranks=0`` each run has ``rank_count``, ``hosts`` and ``torch`` instead of its per-rank
    entries (the page's and ``stepwatch history``'s view: a 1,000-rank run's whole record is
    1.3 MB of JSON with the agent's 40 settings repeated per rank; its brief record 1.8 KB)."""
    return 200, json.dumps(_finite({"job": job, "runs": runs}), allow_nan=False).encode()


def steps_document(state: CollectorState, job: str, ranks: Optional[int] = None) -> dict[str, Any]:
    """``{"job", "ranks": [{"rank", "points": [[step, end_time_s, duration_s], ...],
    "life": [[first step, end_time_s, mean duration_s], ...]}]}``.

    Points are the rank's last ``TREND_POINTS`` steps in arrival order (seconds); ``life`` its
    step time since its start, the mean of each span of 10 s or more (at most 360 spans: a span
    doubles when they are full; ``_life.LifeTrend``), oldest first. An unknown job has no ranks. ``ranks``: only the lowest this many ranks (the page draws 32 lines; a
    64-rank job's whole answer is about 1 MB, a 1,024-rank job's 16 MB).
    """
    out = []
    state.read_ranks(lambda chunk: out.extend({"rank": st.rank, "points": [list(p) for p in st.trend],
                                               "life": st.life.document()}
                                              for st in chunk), job, limit=ranks)
    return {"job": job, "ranks": out}


def steps_json(state: CollectorState, job: str, ranks: Optional[int] = None) -> bytes:
    return json.dumps(_finite(steps_document(state, job, ranks)), allow_nan=False).encode()
