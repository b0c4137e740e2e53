"""Does a profiler session leave the job slower after it closed? Measured on the job's own
step boundaries (same rank, same clock), never with a synchronize.

Wall time per step is read from the boundaries' clock: the span of a run of steps lasting at
least ``_BLOCK_S`` divided by its steps (a GPU job's host steps are bimodal, their rate is not);
a span's figure is the median of its runs, so one evaluation pause does not move it. The
before figure is the ``before_s`` (up to 60 s, at least ``span_s``) up to the session's start;
after it, two spans of ``span_s`` (25 s) starting ``settle_s`` (5 s) after it closed: 55 s,
inside the default spacing of windows (60 s or more). A session that opens before a check is
complete voids it.

The session left the job slower when **both** after spans are at least ``1 + threshold`` x
before, and the threshold is the larger of ``threshold`` (2%) and the job's own wobble just
before the session: the spread (max / min - 1) of the before figure's ``span_s`` pieces. One
span can be the job's own wobble (real 44 ms H100 jobs: 30 s medians moved up to 2% between
neighbours; a launch-bound 13 ms job: 15% within 50 s), a lasting after-effect is in both, and
a job that wobbles by 15% is not judged on 2%. Replayed on 18 real H100 jobs
(bench/aftereffect_real.py): the wobble rule removed the one back-off that came from a dip
just before a window and kept every injected after-effect of 5% and more.

Called on the training thread only; O(1) per step (a deque append), the judgement O(steps in
the spans) once per session.
"""

from __future__ import annotations

import collections
import statistics
from typing import Optional

__all__ = ["AftereffectWatch"]

_BLOCK_S = 1.0  # a run of steps at least this long gives one wall-time-per-step figure
_MAX_BOUNDARIES = 50_000  # step boundary clocks kept (30 s of 1 ms steps and more)


def _per_step(clocks: list) -> Optional[float]:
    """Median over runs of >= _BLOCK_S of (run span / its steps), or None with fewer than 3 runs."""
    values, start, n = [], None, 0
    for c in clocks:
        if start is None:
            start, n = c, 0
            continue
        n += 1
        if c - start >= _BLOCK_S:
            values.append((c - start) / n)
            start, n = c, 0
    return statistics.median(values) if len(values) >= 3 else None


class AftereffectWatch:
    """``step(clock)`` at every step boundary outside a session; ``opened(clock)`` and
    ``closed(label, clock)`` around each session; ``step`` returns a finished check as
    ``(label, ratio, lasting)`` once the second after span is complete, else None."""

    def __init__(self, span_s: float = 25.0, settle_s: float = 5.0, threshold: float = 0.02,
                 before_s: float = 60.0, wobble: bool = True):
        self.span_s, self.settle_s, self.threshold = span_s, settle_s, threshold
        self.before_s, self.wobble = max(before_s, span_s), wobble
        self._clocks: collections.deque = collections.deque(maxlen=_MAX_BOUNDARIES)
        self._before: Optional[float] = None
        self._wobble = 0.0  # spread of the before figure's pieces
        self._pending: Optional[tuple[str, float]] = None  # (label, clock the session closed)
        self.ratio: Optional[float] = None  # the last finished check's after / before

    def opened(self, clock: float, judged: bool = True) -> None:
        """A session opens at ``clock``; ``judged`` False: it gets no check (a session asked
        for because the job already slowed: its "before" would hold that change)."""
        if self._pending is not None:
            self._pending = None  # a session inside the after spans: that check is void
        if not judged:
            self._before = None
            return
        clocks = [c for c in self._clocks if clock - self.before_s <= c <= clock]
        self._before = _per_step([c for c in clocks if c >= clock - self.span_s])
        if self._before is not None and clocks and clock - clocks[0] > self.span_s:
            # the longer before figure, and its pieces' spread (newest piece first)
            self._before = _per_step(clocks) or self._before
            pieces = [_per_step([c for c in clocks if hi - self.span_s <= c < hi])
                      for hi in (clock, clock - self.span_s)]
            pieces = [p for p in pieces if p]
            self._wobble = max(pieces) / min(pieces) - 1 if len(pieces) == 2 and self.wobble else 0.0
        else:
            self._wobble = 0.0

    def closed(self, label: str, clock: float) -> None:
        if self._before is not None:
            self._pending = (label, clock)
        self._clocks.clear()

    def step(self, clock: float) -> Optional[tuple[str, float, bool]]:
        self._clocks.append(clock)
        if self._pending is None:
            return None
        label, closed = self._pending
        first = closed + self.settle_s
        if clock < first + 2 * self.span_s:
            return None
        self._pending = None
        spans = [[c for c in self._clocks if lo <= c < lo + self.span_s]
                 for lo in (first, first + self.span_s)]
        after = [_per_step(s) for s in spans]
        if None in after or not self._before:
            return None
        ratios = [a / self._before for a in after]
        self.ratio = _per_step(spans[0] + spans[1]) / self._before
        return label, self.ratio, min(ratios) >= 1 + max(self.threshold, self._wobble)
