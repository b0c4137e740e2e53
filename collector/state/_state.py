"""Per (job, rank) state built from agent streams, and collector self-accounting.

Threading: every method takes one internal lock, so the gRPC handlers (event loop thread) and a
scrape from any thread see consistent values. Time is always passed in (``now``, Unix seconds)
so expiry is testable with a fake clock. Nothing here raises on odd input: non-finite or
negative durations are skipped in histograms, older samples never replace newer ones.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import itertools
import math
import statistics
import threading
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ..wire import SampleColumns, Samples, StepColumns
from ..detect import median
from .._ring import Ring

from ._trace_requests import TraceBook
from ._life import LifeTrend
from ._yield import PAUSE_EVERY_RANKS, no_pause

__all__ = ["Histogram", "RankKey", "RankState", "CollectorState", "STEP_BUCKETS", "WAIT_BUCKETS", "TREND_POINTS"]

RankKey = tuple  # (job: str, rank: int)

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WAIT_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_EVENT_KINDS = 32
KEPT_EVENTS = 50
RATIO_WINDOW = 100
MAX_SESSIONS = 16
_SNAPSHOT_CHUNK = 256  # ranks read per hold of the lock (dev machine: a scrape ~0.5 ms, copies ~1.5 ms)
TREND_POINTS = 300  # (step, end_time_s, duration_s) kept per rank for the page's trend
WINDOWS_KEPT = 5  # default number of WindowSummary kept per rank (arrival order)
PHASES_KEPT = 32  # sampled steps' phase times kept per rank for stepwatch_step_phase_seconds


SELF_BOUNDS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    """Fixed-bucket histogram in seconds; ``observe`` ignores NaN, infinite and negative values."""

    def __init__(self, bounds: Iterable[float]):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.observe_many((value,))

    def observe_many(self, values: Iterable[float]) -> None:
        """``observe`` each of ``values`` (one batch's worth, without a call per value)."""
        counts, bounds, left = self.counts, self.bounds, bisect.bisect_left
        if type(values) is list and values and (lo := min(values)) >= 0 and math.isfinite(total := sum(values)):
            # The usual batch: every value counts. Buckets from the smallest's to the largest's
            # (often one), each counted by bisection in the sorted values.
            first, last, n = left(bounds, lo), left(bounds, max(values)), len(values)
            if first < last:
                ordered, right, below = sorted(values), bisect.bisect_right, 0
                for k in range(first, last):
                    upto = right(ordered, bounds[k])  # values <= bounds[k]
                    counts[k] += upto - below
                    below = upto
                counts[last] += n - below
            else:
                counts[first] += n
            self.sum += total
            self.count += n
            return
        total, n = 0.0, 0
        for value in values:
            if 0 <= value < math.inf:  # NaN fails both
                counts[left(bounds, value)] += 1  # first bound >= value; past the last: +Inf
                total += value
                n += 1
        self.sum += total
        self.count += n

    @classmethod
    def merged(cls, bounds: Iterable[float], counts: list, sums: list, totals: list) -> "Histogram":
        """One histogram of several with the same bounds (a job's from its ranks'): their bucket
        ``counts`` (a sequence each), ``sums`` and ``totals`` (observations), added bucket by
        bucket in one pass."""
        out = cls(bounds)
        if counts:
            out.counts = [sum(bucket) for bucket in zip(*counts)]
            out.sum = sum(sums)
            out.count = sum(totals)
        return out

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(le, cumulative count)]`` ending with ``("+Inf", count)``."""
        return cumulative(self.bounds, self.counts)


def cumulative(bounds: tuple, counts) -> list[tuple[str, int]]:
    """``[(le, cumulative count)]`` of bucket ``counts`` (the last one +Inf) over ``bounds``."""
    les = _LE_TEXTS.get(bounds)
    if les is None:
        les = _LE_TEXTS[bounds] = tuple(repr(float(b)) for b in bounds) + ("+Inf",)
    return list(zip(les, itertools.accumulate(counts)))


_LE_TEXTS: dict[tuple, tuple] = {}  # bucket bounds -> their `le` label values


@dataclasses.dataclass
class _Session:
    max_seq: int = -1
    max_step: int = 0
    seen: int = 0  # bit i: seq max_seq - i was applied (the last SEQ_WINDOW seqs)


@dataclasses.dataclass
class RankState:
    """Everything known about one rank. Read it only through ``CollectorState.snapshot``."""

    job: str
    rank: int
    hello: agent_pb2.Hello
    gpu: Optional[agent_pb2.GpuIdentity] = None
    streams: int = 0
    last_seen: float = 0.0
    disconnected_at: Optional[float] = None
    sessions: "collections.OrderedDict[str, _Session]" = dataclasses.field(default_factory=collections.OrderedDict)
    # Sum over agent sessions of the highest step seen: monotonic across trainer restarts (kept
    # as steps arrive; a session evicted past MAX_SESSIONS keeps its steps counted).
    steps_total: int = 0
    batched: bool = False  # a Batch was applied (a rank that only said hello is forgotten at its end)
    samples_total: int = 0
    samples_known: bool = False
    tokens_total: int = 0
    tokens_known: bool = False
    step_hist: Histogram = dataclasses.field(default_factory=lambda: Histogram(STEP_BUCKETS))
    wait_hist: Histogram = dataclasses.field(default_factory=lambda: Histogram(WAIT_BUCKETS))
    recent: Ring = dataclasses.field(default_factory=lambda: Ring("dd", RATIO_WINDOW))  # (wait, duration)
    recent_added: int = 0
    recent_sums: Optional[tuple] = None  # (wait, duration) sums of ``recent`` once read; None after a batch
    recent_median: Optional[float] = None  # median duration of ``recent`` once read; None after a batch
    trend: Ring = dataclasses.field(default_factory=lambda: Ring("Qdd", TREND_POINTS))  # (step, end, duration)
    life: LifeTrend = dataclasses.field(default_factory=LifeTrend)  # the step time since the rank's start
    last_step_time: Optional[float] = None
    allocator: Optional[agent_pb2.AllocatorSample] = None
    gpu_sample: Optional[agent_pb2.GpuSample] = None
    host: Optional[agent_pb2.HostSample] = None
    event_counts: dict = dataclasses.field(default_factory=dict)
    # the latest events and profiler-window summaries: () until the first (an empty deque is a
    # ~600-byte block, and most ranks of a churn send neither), then a bounded deque
    events: Union[tuple, collections.deque] = ()
    stats: Optional[agent_pb2.AgentStats] = None
    windows: Union[tuple, collections.deque] = ()
    # the device-timeline phase times (data, forward, backward, sync, optimizer) of the rank's last
    # PHASES_KEPT sampled steps, and their medians (None before the first)
    phase_recent: Ring = dataclasses.field(default_factory=lambda: Ring("ddddd", PHASES_KEPT))
    phases: Optional[tuple] = None

    @property
    def connected(self) -> bool:
        return self.streams > 0

    @property
    def dataloader_wait_ratio(self) -> Optional[float]:
        """Share of step time spent waiting for data over the last 100 steps, in [0, 1]."""
        return wait_ratio(*self.sums())

    @property
    def recent_step_s(self) -> Optional[float]:
        """Mean step time over the last 100 steps."""
        return mean_step_s(self.sums()[1], self.recent_added)

    def sums(self) -> tuple:
        """(wait, duration) summed over ``recent``: taken when first read after a batch (a
        scrape reads them once per rank; a rank sends several batches between scrapes)."""
        if self.recent_sums is None:
            self.recent_sums = (sum(self.recent.column(0)), sum(self.recent.column(1)))
        return self.recent_sums

    def step_median_s(self) -> Optional[float]:
        """Median step time over the last 100 steps (None before any): what a person reading a
        table wants as "the step time now" (a mean carries the first step's lazy start-up)."""
        if self.recent_median is None and len(self.recent):
            self.recent_median = statistics.median(self.recent.column(1))
        return self.recent_median

    def add_recent(self, waits: list, durations: list) -> None:
        """Append (wait, duration) pairs to ``recent``."""
        self.recent.extend_columns(waits, durations)
        self.recent_added += len(waits)
        self.recent_sums = self.recent_median = None

    def session(self, session_id: str) -> _Session:
        if session_id not in self.sessions:
            if len(self.sessions) >= MAX_SESSIONS:
                self.sessions.popitem(last=False)
            self.sessions[session_id] = _Session()
        self.sessions.move_to_end(session_id)
        return self.sessions[session_id]


def wait_ratio(wait: float, duration: float) -> Optional[float]:
    """``wait`` over ``duration`` (a rank's recent sums) clamped to [0, 1]; None without time."""
    if duration <= 0:
        return None
    return min(1.0, max(0.0, wait / duration))


def mean_step_s(duration: float, added: int) -> Optional[float]:
    """Mean step time of the last RATIO_WINDOW steps, from their summed ``duration`` and the
    steps ``added`` so far; None before any step."""
    n = min(added, RATIO_WINDOW)
    return duration / n if n else None


def own(msg: Any) -> Any:
    """A standalone copy of ``msg``, a part of a parsed batch. Parsed messages share one arena:
    a kept part keeps the whole batch alive (a window summary kept from a 4.5 KB batch held
    21 KB; kept windows, events and latest samples were most of a rank's memory)."""
    out = type(msg)()
    out.CopyFrom(msg)
    return out


def _latest(current: Any, samples: Samples) -> Any:
    """The sample with the greatest ``time_s`` among ``current`` and ``samples`` (the last of
    equal times), copied out of the batch when it is one of them."""
    i = samples.latest()
    if i < 0 or (current is not None and samples["time_s"][i] < current.time_s):
        return current
    return own(samples.records[i])


class CollectorState:
    """All ranks (what ingest counted is :class:`~._ingest_counters.IngestCounters`, the
    process's own health :class:`~._health.CollectorHealth`). ``agent_grace_s``: seconds before a gone rank expires;
    ``windows_kept``: WindowSummary kept per rank. ``traces`` holds TraceRefs by request id."""

    def __init__(self, agent_grace_s: float, windows_kept: int = WINDOWS_KEPT):
        self.agent_grace_s = agent_grace_s
        self.windows_kept = windows_kept
        self.traces = TraceBook()
        self._lock = threading.Lock()
        self._ranks: dict[RankKey, RankState] = {}
        self._job_ranks: dict[str, int] = {}  # job -> ranks held

    def admit(self, hello: agent_pb2.Hello, max_jobs: int, max_ranks: int) -> Optional[str]:
        """None when a stream of ``hello`` may go on; else the refusal reason (a held rank
        always may: a reconnect is never refused)."""
        with self._lock:
            if (hello.job, hello.rank) in self._ranks:
                return None
            held = self._job_ranks.get(hello.job)
            if held is None and len(self._job_ranks) >= max_jobs:
                return "too_many_jobs"
            if held is not None and held >= max_ranks:
                return "too_many_ranks"
            return None

    def connect(self, hello: agent_pb2.Hello, now: float) -> RankKey:
        """Register a stream for the Hello's rank (already validated) and return its key."""
        key = (hello.job, hello.rank)
        with self._lock:
            st = self._ranks.get(key)
            if st is None:
                st = self._ranks[key] = RankState(job=hello.job, rank=hello.rank, hello=hello)
                self._job_ranks[hello.job] = self._job_ranks.get(hello.job, 0) + 1
            st.hello = hello
            if hello.HasField("gpu"):
                st.gpu = hello.gpu
            st.streams += 1
            st.last_seen = now
            st.disconnected_at = None
            st.session(hello.session_id)
        return key

    def disconnect(self, key: RankKey, now: float) -> None:
        """End one stream of ``key``; the rank counts as gone once its last stream ends."""
        with self._lock:
            st = self._ranks.get(key)
            if st is None:
                return
            st.streams = max(0, st.streams - 1)
            st.last_seen = now
            if st.streams == 0:
                st.disconnected_at = now

    def _forget(self, key: RankKey) -> None:
        del self._ranks[key]
        left = self._job_ranks.get(key[0], 1) - 1
        if left > 0:
            self._job_ranks[key[0]] = left
        else:
            self._job_ranks.pop(key[0], None)

    def apply_batch(self, key: RankKey, session_id: str, batch: agent_pb2.Batch, now: float,
                    steps: StepColumns, samples: SampleColumns) -> tuple[str, int]:
        """Apply ``batch`` (``steps``, ``samples``: its columns) unless its sequence number says
        otherwise. Returns the verdict, ``"applied"``, ``"duplicate"`` (seen before: nothing
        changes), ``"jump"`` (too far ahead: refused, nothing changes) or ``"gone"`` (the rank
        expired while its stream lived), and how many more records the agent says it dropped
        than its last stats said."""
        with self._lock:
            st = self._ranks.get(key)
            if st is None:
                return "gone", 0
            st.last_seen, st.batched = now, True
            sess = st.session(session_id)
            verdict = _sequence(sess, batch.seq, max(steps.step) if len(steps) else None)
            if verdict != "new":
                return verdict, 0
            return "applied", self._apply(st, sess, batch, steps, samples)

    def _apply(self, st: RankState, sess: _Session, batch: agent_pb2.Batch, steps: StepColumns,
               samples: SampleColumns) -> int:
        if batch.HasField("gpu"):
            st.gpu = own(batch.gpu)
        if len(steps):
            self._apply_steps(st, sess, steps)
        st.allocator = _latest(st.allocator, samples.allocator)
        st.gpu_sample = _latest(st.gpu_sample, samples.gpu)
        st.host = _latest(st.host, samples.host)
        for ev in batch.events or ():  # (an empty repeated field: its truth is cheaper than its loop)
            kind = ev.kind[:64] or "unknown"
            if kind not in st.event_counts and len(st.event_counts) >= MAX_EVENT_KINDS:
                kind = "other"
            st.event_counts[kind] = st.event_counts.get(kind, 0) + 1
            if not st.events:
                st.events = collections.deque(maxlen=KEPT_EVENTS)
            st.events.append(own(ev))
        dropped = 0
        if batch.HasField("stats"):
            old = st.stats.records_dropped if st.stats is not None else 0
            dropped = max(0, batch.stats.records_dropped - old)
            st.stats = own(batch.stats)
        for w in batch.windows or ():
            if not st.windows:
                st.windows = collections.deque(maxlen=self.windows_kept)
            st.windows.append(own(w))
        p = steps.phase_times
        if p is not None:
            st.phase_recent.extend_columns(*p.device)
            st.phases = tuple(median(list(st.phase_recent.column(k))) for k in range(5))
        if batch.traces:
            self.traces.add(st.job, st.rank, st.hello.host, map(own, batch.traces))
        return dropped

    @staticmethod
    def _apply_steps(st: RankState, sess: _Session, c: StepColumns) -> None:
        top = max(c.step)
        if top > sess.max_step:
            st.steps_total += top - sess.max_step
            sess.max_step = top
        st.step_hist.observe_many(c.duration_s)
        st.wait_hist.observe_many(c.dataloader_wait_s)
        # (finite: the pipeline dropped records with non-finite numbers)
        if min(c.duration_s) >= 0:  # every record usable (the usual case)
            waits = c.dataloader_wait_s if min(c.dataloader_wait_s) >= 0.0 else [w if w > 0.0 else 0.0 for w in c.dataloader_wait_s]
            st.add_recent(waits, c.duration_s)
            st.trend.extend_columns(c.step, c.end_time_s, c.duration_s)  # arrival order
            st.life.add(c.step, c.end_time_s, c.duration_s)
            last = max(c.end_time_s)
        else:  # negative durations (a clock stepped back): skipped where they would count
            keep = [i for i, d in enumerate(c.duration_s) if d >= 0]
            durations = [c.duration_s[i] for i in keep]
            if keep:
                st.add_recent([max(0.0, c.dataloader_wait_s[i]) for i in keep], durations)
                st.trend.extend_columns([c.step[i] for i in keep], [c.end_time_s[i] for i in keep], durations)
                st.life.add([c.step[i] for i in keep], [c.end_time_s[i] for i in keep], durations)
            last = max((c.end_time_s[i] for i in keep), default=None)
        if last is not None and (st.last_step_time is None or last > st.last_step_time):
            st.last_step_time = last
        if c.samples is not None:
            st.samples_total += sum(filter(None, c.samples))  # (None and 0 add nothing)
            st.samples_known = True
        if c.tokens is not None:
            st.tokens_total += sum(filter(None, c.tokens))
            st.tokens_known = True

    def expire(self, now: float) -> list[RankKey]:
        """Remove ranks disconnected for longer than ``agent_grace_s``, and at once those whose
        streams only said hello (no Batch: they hold no job slot); return their keys."""
        with self._lock:
            gone = [k for k, st in self._ranks.items() if st.disconnected_at is not None
                    and (not st.batched or now - st.disconnected_at > self.agent_grace_s)]
            for key in gone:
                self._forget(key)
        return gone

    def snapshot(self, light: bool = False, job: Optional[str] = None,
                 pause: Callable[[], None] = no_pause, frozen: bool = False,
                 median: bool = False) -> list[RankState]:
        """Shallow copies of all rank states, sorted by (job, rank); safe to read without the lock.
        ``light``: the step lists and the event list are left empty (a reader of totals only).
        ``median``: each copy carries its ``step_median_s`` (taken under the lock).
        ``job``, ``pause``, ``frozen``: as :meth:`read_ranks` (frozen: the states, not copies)."""
        out: list[RankState] = []
        if frozen:
            self.read_ranks(out.extend, job, pause, frozen)
        else:
            self.read_ranks(lambda chunk: out.extend(_copy(st, light, median) for st in chunk), job, pause)
        return out

    def snapshot_chunks(self, light: bool = False, job: Optional[str] = None, median: bool = False,
                        chunk: int = _SNAPSHOT_CHUNK) -> Iterator[list[RankState]]:
        """:meth:`snapshot` a chunk of ``chunk`` ranks at a time, in (job, rank) order, the lock
        held only while a chunk is copied: a reader done with each chunk before it takes the
        next holds one chunk's copies, not the fleet's (the whole list of 10,000 ranks made
        hundreds of thousands of young objects at once, which the collector's 1 s young-generation
        collection on the event loop then walked: 80-120 ms a time)."""
        keys = self._keys(job)
        for i in range(0, len(keys), chunk):
            with self._lock:
                got = self._ranks.get
                out = [_copy(st, light, median) for key in keys[i:i + chunk] if (st := got(key)) is not None]
            yield out

    def _keys(self, job: Optional[str] = None, limit: Optional[int] = None) -> list[RankKey]:
        """The ranks held now (``job``'s only), sorted, the first ``limit`` of them."""
        with self._lock:
            return sorted(k for k in self._ranks if job is None or k[0] == job)[:limit]

    def read_ranks(self, read: Callable[[list[RankState]], Any], job: Optional[str] = None,
                   pause: Callable[[], None] = no_pause, frozen: bool = False, chunk: int = _SNAPSHOT_CHUNK,
                   limit: Optional[int] = None) -> None:
        """``read(states)`` for every rank (``job``: that job's only; ``limit``: the first this
        many) in (job, rank) order, a
        chunk at a time with the lock held: each rank consistent in itself, ingest going on
        between chunks, a rank gone meanwhile left out. ``read`` keeps what ingest replaces
        (protobuf samples, the Hello) by reference and copies what it changes in place.
        ``pause``: called between chunks, without the lock (a scrape's yield). ``frozen``: one
        call over the states without the lock, for a reader nothing writes beside (a forked
        render process). ``chunk``: ranks per hold of the lock."""
        keys = self._keys(job, limit)
        if frozen:
            read([self._ranks[k] for k in keys])
            return
        for i in range(0, len(keys), chunk):  # the lock is let go between chunks: ingest goes on
            with self._lock:
                got = self._ranks.get
                read([st for key in keys[i:i + chunk] if (st := got(key)) is not None])
            if i % PAUSE_EVERY_RANKS == 0:
                pause()

    @property
    def lock(self) -> threading.Lock:
        """Held while any rank changes (a forked render holds it across fork())."""
        return self._lock

    def connected_agents(self) -> int:
        with self._lock:
            return sum(1 for st in self._ranks.values() if st.connected)

    def connections(self) -> list[tuple[str, int, bool, Optional[float]]]:
        """``(job, rank, connected, disconnected_at)`` per known rank, cheap (no copies): detection."""
        with self._lock:
            return [(st.job, st.rank, st.connected, st.disconnected_at) for st in self._ranks.values()]


def _clone(obj):
    """A shallow copy of a plain object (``copy.copy`` costs ~25 us through __reduce_ex__)."""
    dup = object.__new__(type(obj))
    dup.__dict__.update(obj.__dict__)
    return dup


# What a light copy holds in place of its step rings: shared and empty (copies are only read;
# two fresh rings per rank cost 9% of a scrape's CPU at 2,000 ranks, py-spy).
_NO_RECENT, _NO_TREND, _NO_LIFE = Ring("dd", RATIO_WINDOW), Ring("Qdd", TREND_POINTS), LifeTrend()
_NO_SESSIONS: "collections.OrderedDict[str, _Session]" = collections.OrderedDict()


SEQ_WINDOW = 4096  # seqs behind the highest one still told apart (applied or not)
SEQ_MAX_JUMP = 1 << 24  # a session's seq never moves further ahead than this in one batch
SEQ_TOP = 1 << 62  # a seq this high is damage (an agent counts from 1)


def _sequence(sess: _Session, seq: int, last_step: Optional[int]) -> str:
    """"new", "duplicate" (acked, ignored) or "jump" (refused: acked, ignored, counted) for a
    batch ``seq`` of session ``sess``; marks a new one seen.

    Seqs are told apart in a window of SEQ_WINDOW behind the highest: a batch whose seq was
    damaged upwards (one flipped bit: 11 -> 75) no longer makes the next 63 batches look like
    duplicates, and a later batch with a seq seen already but steps beyond every applied step
    is new data, not a resend. A seq far ahead (SEQ_MAX_JUMP: the spool's own drops are far
    fewer) or near the top of the range (SEQ_TOP) is refused and never moves the window."""
    if seq >= SEQ_TOP or (sess.max_seq >= 0 and seq > sess.max_seq + SEQ_MAX_JUMP):
        return "jump"
    if seq <= 0:  # unset: agents count from 1
        return "duplicate"
    if seq > sess.max_seq:
        shift = seq - sess.max_seq
        sess.seen = ((sess.seen << shift) | 1) & ((1 << SEQ_WINDOW) - 1) if shift < SEQ_WINDOW else 1
        sess.max_seq = seq
        return "new"
    behind = sess.max_seq - seq
    fresh = last_step is not None and last_step > sess.max_step
    if behind >= SEQ_WINDOW or sess.seen >> behind & 1:
        return "new" if fresh else "duplicate"
    sess.seen |= 1 << behind
    return "new"


def _copy(st: RankState, light: bool = False, median: bool = False) -> RankState:
    """Copy the mutable containers; protobuf samples are replaced, never mutated, so they are
    shared. ``light`` (a scrape): ``recent`` (its sums are kept), the page's step trends, the
    event list and the sessions (their steps_total is kept) are left empty."""
    st.sums()  # (kept by a light copy, which has no ``recent``)
    if median:
        st.step_median_s()
    dup = _clone(st)
    if light:  # (steps_total is kept apart from them)
        dup.sessions = _NO_SESSIONS
    else:
        dup.sessions = collections.OrderedDict((k, _clone(v)) for k, v in st.sessions.items())
    for name in ("step_hist", "wait_hist"):
        h = _clone(getattr(st, name))
        h.counts = list(h.counts)
        setattr(dup, name, h)
    dup.recent = _NO_RECENT if light else st.recent.copy()
    dup.trend = _NO_TREND if light else st.trend.copy()
    dup.life = _NO_LIFE if light else st.life.copy()
    dup.event_counts = dict(st.event_counts)
    dup.events = collections.deque(st.events, maxlen=KEPT_EVENTS) if st.events and not light else ()
    dup.windows = collections.deque(st.windows, maxlen=st.windows.maxlen) if st.windows else ()
    return dup
