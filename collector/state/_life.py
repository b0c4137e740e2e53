"""LifeTrend: a rank's step time over its whole life in a bounded number of points, for the
page's "since the start" chart (``/api/steps``' ``life``).

Steps are cut by their end time into spans of ``span_s`` (10 s to start); each closed span is a
point: its first step, its last end time and its mean step time (the span's time per step, its
pauses included: the job's throughput then). When ``points`` points are held, adjacent pairs
merge (the earlier first step, the later end time, the mean over both spans' steps) and the span
doubles: a day of a job is 360 points of 4 min. Steps that arrive with an end time before the
open span's start join the open span (a clock that stepped back moves no point). Per batch: a
bisection and a sum per span it touches; memory: four typed columns of at most ``points`` rows
(11.5 KB per rank at 360), whatever the step rate.
"""

from __future__ import annotations

import array
import bisect
from typing import Optional

__all__ = ["LifeTrend", "LIFE_POINTS", "LIFE_SPAN_S"]

LIFE_POINTS = 360
LIFE_SPAN_S = 10.0


class LifeTrend:
    __slots__ = ("points", "span_s", "_step", "_end", "_mean", "_n", "_start", "_first", "_last", "_sum", "_count")

    def __init__(self, points: int = LIFE_POINTS, span_s: float = LIFE_SPAN_S):
        self.points, self.span_s = max(2, points), span_s
        # closed spans: first step, last end time, mean step time, steps
        self._step, self._end, self._mean, self._n = array.array("q"), array.array("d"), array.array("d"), array.array("q")
        self._start: Optional[float] = None  # the open span's start
        self._first = 0  # the open span's first step
        self._last = 0.0  # the open span's last end time
        self._sum, self._count = 0.0, 0  # the open span's step times

    def __len__(self) -> int:
        return len(self._step)

    def add(self, step: list, end_time_s: list, duration_s: list) -> None:
        """A batch of steps as columns, in arrival order (times may step back)."""
        n, i = len(step), 0
        while i < n:
            if self._start is None:
                self._start, self._first = end_time_s[i], step[i]
            limit = self._start + self.span_s
            # the steps before the first that ends at or past the limit stay in the open span
            # (times arrive in order; a clock step back only makes a span longer)
            j = bisect.bisect_left(end_time_s, limit, i) if end_time_s[n - 1] >= end_time_s[i] else n
            if j > i:
                self._sum += sum(duration_s[i:j])
                self._count += j - i
                self._last = end_time_s[j - 1]
            if j >= n:
                return
            self._close()
            i = j

    def _close(self) -> None:
        if self._count:
            self._step.append(self._first)
            self._end.append(self._last)
            self._mean.append(self._sum / self._count)
            self._n.append(self._count)
            if len(self._step) >= self.points:
                self._merge()
        self._start, self._sum, self._count = None, 0.0, 0

    def _merge(self) -> None:
        k = len(self._step) // 2 * 2  # (an odd last span stays as it is)
        s, e, m, c = self._step, self._end, self._mean, self._n
        steps, ends = array.array("q", s[0:k:2]), array.array("d", e[1:k:2])
        counts = array.array("q", (a + b for a, b in zip(c[0:k:2], c[1:k:2])))
        means = array.array("d", ((ma * ca + mb * cb) / (ca + cb)
                                  for ma, ca, mb, cb in zip(m[0:k:2], c[0:k:2], m[1:k:2], c[1:k:2])))
        steps.extend(s[k:])
        ends.extend(e[k:])
        means.extend(m[k:])
        counts.extend(c[k:])
        self._step, self._end, self._mean, self._n = steps, ends, means, counts
        self.span_s *= 2

    def copy(self) -> "LifeTrend":
        dup = LifeTrend.__new__(LifeTrend)
        for name in self.__slots__:
            value = getattr(self, name)
            setattr(dup, name, array.array(value.typecode, value) if isinstance(value, array.array) else value)
        return dup

    def first_end(self) -> Optional[float]:
        """The first closed span's end time, None before one closed."""
        return self._end[0] if len(self._end) else None

    def last_end(self) -> Optional[float]:
        """The last closed span's end time, None before one closed."""
        return self._end[-1] if len(self._end) else None

    def since(self, lo: float) -> tuple:
        """(end times, means) of the closed spans ending at or after ``lo``, oldest first (a
        bisection: ends are in arrival order, a clock that stepped back joins the open span)."""
        k = bisect.bisect_left(self._end, lo)
        return self._end[k:], self._mean[k:]

    def document(self) -> list[list]:
        """``[[first step, end time, mean step time], ...]``, oldest first (closed spans)."""
        return [[s, e, m] for s, e, m in zip(self._step, self._end, self._mean)]
