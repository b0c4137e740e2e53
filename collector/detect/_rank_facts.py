"""What every rule shares about a rank, kept by the engine (:class:`RankFacts`: its liveness,
which of a batch's steps the slowdown rules judge, the pauses counted), and :class:`Columns`, a
SampleTable over named columns for the engine's one-sample entry points."""

from __future__ import annotations

import collections
from typing import Iterator, Optional, Sequence

from ._config import DetectionConfig
from ._liveness import RankLiveness
from ._rule import Steps
from ._types import median

__all__ = ["RankFacts", "Columns", "job_liveness"]

_MAX_PHASE_KINDS = 8  # marked phase kinds per rank (a label each); more count as "other"
# A marked step is left out of drift and stragglers only when the phase delayed it: at least
# this many times the median of the rank's last 64 steps. Marks never hide a slowdown: a Hugging
# Face job logging every step marks every step "log", and a +70% slowdown went unreported when
# every marked step was left out.
_MARK_DELAY = 1.2
# ... and only when its kind marked under this share of those steps: a kind that marks most steps
# is part of the step, not a pause. A +140% step change of a job logging every step had each
# marked step left out as "delayed" until the slow steps were half the recent ones (32 steps),
# and the change was dated there.
_ROUTINE_SHARE = 0.5


class Columns:
    """A :class:`~._types.SampleTable` over named columns (the engine's one-sample entry points;
    a column not given reads 0, or None through :meth:`optional`)."""

    def __init__(self, **columns: list):
        self._cols = columns
        self._n = len(next(iter(columns.values()))) if columns else 0

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, name: str) -> list:
        v = self._cols.get(name)
        return [0] * self._n if v is None else [0 if x is None else x for x in v]

    def optional(self, name: str) -> list:
        return list(self._cols.get(name, [None] * self._n))

    def last(self, name: str, optional: bool = False) -> object:
        return (self.optional(name) if optional else self[name])[-1]


class RankFacts:
    """What the rules share about one rank."""

    def __init__(self, cfg: DetectionConfig, job: str, rank: int):
        self.seen = 0
        self.profiled = 0
        self.marked: dict[str, int] = {}  # phase kind -> marked pause episodes
        self.last_phase = ""
        self.recent: collections.deque = collections.deque(maxlen=64)  # durations (marked or not)
        # their marks ("" none), from the rank's first mark on (760 bytes a rank otherwise)
        self.recent_marks: Optional[collections.deque] = None
        self.mark_counts: dict[str, int] = {}  # marks in recent_marks by kind ("" left out)
        self.live = RankLiveness(cfg.liveness, job, rank)

    def judge(self, s: Steps, profiled: Sequence[int], phases: Optional[dict], warmup_steps: int) -> None:
        """Which of a batch's steps the slowdown rules judge (``s.judged``: None for all of them,
        the usual batch) and where profiler windows ended (``s.window_ends``). Left out: the
        rank's first ``warmup_steps``, profiled steps and marked steps their phase delayed.
        A marked step counts as a plain one when its kind marked at least half the rank's recent
        steps (routine: logging every step). Every step counts in the rank's recent ones and its
        marks."""
        n = len(s)
        warm = max(0, warmup_steps - self.seen)  # rows before this index are warm-up
        self.seen += n
        if not profiled and not phases and not self.last_phase:
            self.recent.extend(s.duration_s[-64:])
            if self.mark_counts:
                for _ in range(min(n, 64)):
                    self._remember("")
            s.judged = None if warm == 0 else list(range(warm, n))
            return
        keep = []
        skip = set(profiled)
        s.window_ends = [(s.step[i], s.end_time_s[i]) for i in sorted(skip) if i + 1 not in skip and i < n]
        recent = self.recent
        for i in range(n):
            phase = self.mark(phases.get(i, "") if phases else "")
            if i in skip:
                self.profiled += 1
                continue
            # a marked step the phase did not delay (against the rank's recent steps, marked
            # or not), or of a routine kind, is a plain step
            if i >= warm and (not phase or (len(recent) >= 8 and (
                    s.duration_s[i] < _MARK_DELAY * median(recent)
                    or self.mark_counts.get(phase, 0) >= _ROUTINE_SHARE * len(recent)))):
                keep.append(i)
            recent.append(s.duration_s[i])
            self._remember(phase)
        s.judged = keep

    def _remember(self, phase: str) -> None:
        """Count ``phase`` (a step's mark, "" for none) among the recent steps' marks."""
        marks, counts = self.recent_marks, self.mark_counts
        if marks is None:
            if not phase:
                return  # (no mark yet: nothing to count)
            marks = self.recent_marks = collections.deque(maxlen=64)
        if len(marks) == marks.maxlen:
            old = marks[0]
            if old:
                left = counts[old] - 1
                if left:
                    counts[old] = left
                else:
                    del counts[old]
        marks.append(phase)
        if phase:
            counts[phase] = counts.get(phase, 0) + 1

    def mark(self, phase: str) -> str:
        """A step's marked phase ("" for none): a run of one kind counts once in ``marked``;
        past _MAX_PHASE_KINDS kinds it is "other". Returns the phase as counted."""
        if phase != self.last_phase:
            if phase:
                if phase not in self.marked and len(self.marked) >= _MAX_PHASE_KINDS:
                    phase = "other"
                self.marked[phase] = self.marked.get(phase, 0) + 1
            self.last_phase = phase
        return phase

    def pauses(self, drift: dict) -> dict:
        """The rank's pause counts by kind: the drift detector's (``drift``), its marked phases'
        and its profiled steps' ("profiler"). Read by a scrape thread: copies."""
        kinds = dict(drift)
        for kind, n in list(self.marked.items()):
            kinds[kind] = kinds.get(kind, 0) + n
        if self.profiled:
            kinds["profiler"] = self.profiled
        return kinds


def job_liveness(ranks: list, per: int) -> Iterator[None]:
    """Per job, the ranks connected now and when its last rank disconnected, over ``ranks``
    (((job, rank), RankFacts) pairs): a generator that yields every ``per`` ranks and returns
    ``(connected {job: n}, last_gone {job: time})``."""
    connected: dict[str, int] = {}
    last_gone: dict[str, float] = {}
    for i, ((job, _), r) in enumerate(ranks):
        connected[job] = connected.get(job, 0) + (1 if r.live.connected else 0)
        gone = r.live.disconnected_at
        if not r.live.connected and gone is not None:
            last_gone[job] = max(last_gone.get(job, gone), gone)
        if i % per == per - 1:
            yield
    return connected, last_gone
