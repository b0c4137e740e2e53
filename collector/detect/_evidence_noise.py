"""SourceNoise: how far one source of a rank's evidence wanders by itself, so that its growth
at a shift can be read in its own spreads.

A launch-bound job's step time wanders with its host (real H200 jobs of 11-13 ms steps: the
spread of 30 s medians 3.4-9.9%, so ``z`` = 4 spreads asks for +14..40%), while the device time
of a phase the host does not bound hardly moves (h200v_1gpu_xs: backward and optimizer 0.001 ms,
forward 0.36 ms = 2.7% of its step; h200x_1gpu_m, 40 ms: forward 1.1%, the others under 0.1%).
A phase that grew by +10% of the step then stands hundreds of its own spreads out where the step
time stands one or two: the evidence, not the step series, says whether the job changed.

The spread of a source over a run of ``n`` blocks is measured from the same differences as the
step time's (:func:`._drift_noise.run_differences`, between the medians of adjacent runs), but
read at their 90th percentile as 1.645 spreads of a normal series (a source's occasional waves
are its pace too, which the median of the differences ignores), divided by sqrt(2), in the
source's own unit (seconds), over the source's blocks of the last ``_SPAN_S`` before the span a shift is compared against, leaving out
the blocks inside the rank's episodes and before its settling time (``loud`` spans: the warm-up's
compiling and allocator growth are no measure of a source's pace). A history too short for runs of
``n`` measures runs as long as it holds (shorter runs spread more: the reading errs towards
blind), and none under ``MIN_RUN`` blocks: the step time's own spread decides then. Never under
``_FLOOR`` of the step: a perfectly still phase does not make any growth of it significant.

A collector restart empties the rank's blocks: for its first ~90 s of data no source can be
measured, and a change of the job then waits for the step time's spreads alone (a +10% forward
on a wandering 2 x H200 host raised 62 s after it began, 34 s without the restart). The spreads
measured before it (:meth:`SourceNoise.saved`, carried in the drift state) stand in
(:meth:`SourceNoise.restore`) until the rank's own blocks measure the source again. A spread is
measured when a shift is read against its source; so that every source is carried, a rank whose
evidence was read at all also measures one source a save (:meth:`SourceNoise.measure_for_restart`,
``RankEvidence.measure_unread``), apart from what it decides on.

Cost: a measurement sorts a few hundred short lists (~1 ms); each is kept per (source, run)
for ``_KEEP_S`` of data time, so a rank whose step wanders over the ratios for minutes measures
each source about once a minute. One caller at a time.
"""

from __future__ import annotations

import bisect
import math
from typing import Callable, Optional, Sequence

from ._drift_noise import run_differences

__all__ = ["SourceNoise", "MIN_RUN"]

_SPAN_S = 1800.0   # history a source's spread is measured over
_KEEP_S = 60.0     # a measurement serves spans ending up to this much later
MIN_RUN = 6       # blocks per run at the least (30 s: the critical window)
_RUNS = 6          # runs the history must hold beyond two
_FLOOR = 0.005     # of the step: the smallest spread a source is read with
_KEPT_MAX = 64     # measurements kept per rank
_QUANTILE, _Q_SIGMAS = 0.9, 1.645  # the quantile of the differences read, and the sigmas of a normal series it stands at


class SourceNoise:
    """Spreads of one rank's evidence sources (blocks of ``block_s``), kept for a minute each;
    ``key`` names a source (e.g. ("phase", (2,), points))."""

    __slots__ = ("_kept", "_block_s", "_restored", "_for_restart")

    def __init__(self, block_s: float) -> None:
        self._kept: dict = {}  # (key, n) -> (edge it was measured to, spread s or None)
        self._block_s = block_s
        self._restored: dict = {}  # key -> {n: spread s} measured before a collector restart
        self._for_restart: dict = {}  # (key, n) -> (edge, spread s or None) measured at a save

    def spread(self, key: tuple, n: int, edge: float, step_s: float,
               rows: Callable[[], Sequence[tuple]], loud: Callable[[], Sequence[tuple]]) -> Optional[float]:
        """The spread (seconds) of ``key``'s medians over runs of ``n`` blocks, measured on its
        blocks (``rows()``: (end time, value)) before ``edge`` outside the ``loud()`` (start, end)
        spans; None when the history holds too few blocks."""
        kept = self._kept.get((key, n))
        if kept is not None and kept[0] <= edge < kept[0] + _KEEP_S:
            s = kept[1]
        else:
            s = self._measure(n, edge, rows, loud)
            if len(self._kept) >= _KEPT_MAX:
                self._kept.clear()
            self._kept[(key, n)] = (edge, s)
        if s is None and self._restored:
            s = self._before_restart(key, n)
        return None if s is None else max(s, _FLOOR * step_s)

    def _measure(self, n: int, edge: float, rows: Callable[[], Sequence[tuple]],
                 loud: Callable[[], Sequence[tuple]]) -> Optional[float]:
        """The spread of ``rows()``'s medians over runs of ``n`` blocks, from the last ``_SPAN_S``
        before ``edge`` outside ``loud()``; None when too few blocks."""
        return _spread(_quiet([r for r in rows() if edge - _SPAN_S <= r[0] < edge], loud(), self._block_s), n)

    def read(self) -> bool:
        """Whether any source was measured (the rank's evidence was read for a shift)."""
        return bool(self._kept)

    def due(self, key: tuple, edge: float) -> bool:
        """Whether ``key`` wants measuring for :meth:`saved` at ``edge``: no spread of it was
        measured over the last ``_SPAN_S`` (by :meth:`spread` or at a save), and no attempt at a
        save in the last ``_KEEP_S`` found too few blocks."""
        measured = [e for (k, _), (e, s) in self._kept.items() if k == key and s is not None]
        for (k, _), (e, s) in self._for_restart.items():
            if k == key:
                if s is None and edge - e < _KEEP_S:
                    return False
                if s is not None:
                    measured.append(e)
        return not measured or edge - max(measured) > _SPAN_S

    def measure_for_restart(self, key: tuple, n: int, edge: float, rows: Callable[[], Sequence[tuple]],
                            loud: Callable[[], Sequence[tuple]]) -> None:
        """Measure ``key`` over runs of ``n`` blocks before ``edge`` as :meth:`spread` would, for
        :meth:`saved` alone: what the rank decides now is not changed by it (the measurements
        :meth:`spread` keeps are its own)."""
        s = self._measure(n, edge, rows, loud)
        if len(self._for_restart) >= _KEPT_MAX:
            self._for_restart.clear()
        self._for_restart[(key, n)] = (edge, s)

    def _before_restart(self, key: tuple, n: int) -> Optional[float]:
        """The spread of ``key`` over runs of ``n`` blocks or fewer (shorter runs spread more:
        the reading errs towards blind) measured before a restart, or None."""
        runs = self._restored.get(key)
        fits = [m for m in runs if m <= n] if runs else ()
        return runs[max(fits)] if fits else None

    def saved(self) -> list:
        """The spreads measured, as ``[key, n, spread s]`` (``key`` with its tuples as lists):
        what :meth:`restore` takes after a restart."""
        got = {(key, n): s for (key, n), (_, s) in self._kept.items() if s is not None}
        for (key, n), (_, s) in self._for_restart.items():
            if s is not None:
                got.setdefault((key, n), s)
        for key, runs in self._restored.items():  # (carried on until measured again)
            for n, s in runs.items():
                got.setdefault((key, n), s)
        return [[_listed(key), n, s] for (key, n), s in got.items()][:_KEPT_MAX]

    def restore(self, entries) -> None:
        """Take up :meth:`saved`'s spreads as the measure of their sources while the rank's own
        blocks cannot measure them. Entries that do not read are left out."""
        for entry in entries[:_KEPT_MAX] if isinstance(entries, list) else ():
            try:
                key, n, s = _tupled(entry[0]), int(entry[1]), float(entry[2])
            except (TypeError, ValueError, IndexError, KeyError, RecursionError):
                continue
            if _a_key(key) and n > 0 and math.isfinite(s) and s >= 0:
                self._restored.setdefault(key, {})[n] = s


def _listed(x):
    return [_listed(v) for v in x] if isinstance(x, tuple) else x


def _tupled(x):
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x


def _a_key(key) -> bool:
    """Whether ``key`` reads as a source's: its kind, then phase columns (ints) and a points
    kind, as :meth:`~._evidence.RankEvidence.spreads` makes them."""
    return (isinstance(key, tuple) and 0 < len(key) <= 3 and isinstance(key[0], str)
            and all(isinstance(v, int) or (isinstance(v, tuple) and all(isinstance(c, int) for c in v))
                    for v in key[1:]))


def _quiet(rows: list, loud: Sequence[tuple], block_s: float) -> list:
    """The values of ``rows`` ((end time, value), a block of ``block_s`` ending there) outside
    every span of ``loud`` (sorted (start, end) pairs)."""
    if not loud:
        return [r[1] for r in rows]
    starts = [s for s, _ in loud]
    out = []
    for t, v in rows:
        i = bisect.bisect_left(starts, t) - 1  # the last span starting before the block's end
        if i >= 0 and loud[i][1] > t - block_s:
            continue
        out.append(v)
    return out


def _spread(ys: list, n: int) -> Optional[float]:
    n = min(n, (len(ys) - _RUNS) // 2)
    if n < MIN_RUN:
        return None
    diffs = sorted(run_differences(ys, n))
    if not diffs:
        return None
    return diffs[min(len(diffs) - 1, int(_QUANTILE * len(diffs)))] / _Q_SIGMAS / math.sqrt(2)
