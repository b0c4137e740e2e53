"""StepBuckets: a drift detector's kept steps summarised per ``bucket_s`` of data time, the pause
runs left out and counted, and the steps around each profiler window's end.

A step at least ``pause_ratio`` x the current ``level`` is a pause step (evaluation, checkpoint,
stall): counted (a run of one is a "stall", longer runs a "pause") and left out of every bucket.
A run of ``max_pause_steps`` is a level change: its steps are then kept. So is a run of at least
``min_bucket_steps`` that began under ``pause_ratio`` squared (2.25x) and that one quicker step
ended: a change wobbling around the limit, not a pause. A bucket closes once it spans
``bucket_s`` and holds ``min_bucket_steps``; its summary (the median, or ``quantile``) goes to
``on_bucket(first step, end time, log summary)``, whose result the feeds return.
"""

from __future__ import annotations

import bisect
import collections
import math
import weakref
from typing import Callable, Optional, Union

from ._config import DriftConfig
from ._types import finite_positive, median

__all__ = ["StepBuckets"]

# Kept steps compared just before and just after a profiler window's end: few, so a change of
# the job's own a few steps away from a window (windows every 32 steps in a CPU test) shows no
# jump there ...
_AROUND_STEPS = 10
# ... and the jump must also hold over this many kept steps either side: the first steps after a
# window are slow by themselves, and a host that slowed by degrees (2 x H200, 19 ms steps, +3%
# from 225 s and +8% from 300 s) had a window end within a bucket of its onset whose first 10
# steps stood +5% above the 10 before it, its next 50 no higher than the 50 before
_AROUND_HOLD = 50


class StepBuckets:
    """``level``: log seconds, the current level pauses are judged against (the detector sets
    it; None before the first bucket); ``first_time``: the first kept step's end time;
    ``pauses``: pause runs by kind."""

    def __init__(self, cfg: DriftConfig, quantile: float, on_bucket: Callable[[int, float, float], bool]):
        self.cfg, self.quantile = cfg, quantile
        # (weakly: the detector owns these buckets, so a strong bound method would make each
        # rank's detection state a reference cycle, freed only by a full collection, which the
        # collector's freezer runs early only under stream churn; its owner by a plain weak
        # reference and its function, as a WeakMethod is ~450 bytes more)
        self._owner, self._on_bucket = weakref.ref(on_bucket.__self__), on_bucket.__func__
        self._clip = math.log(cfg.pause_ratio)
        self.level: Optional[float] = None
        self.first_time: Optional[float] = None
        self.pauses: dict[str, int] = {}
        self._bucket: list[float] = []
        self._bucket_start: Optional[tuple[int, float]] = None
        self._held: list[tuple[int, float, float]] = []
        self._level_moved = False
        # The agent's own cost: kept steps just before each profiler window's end and just after
        # it, [window end step, end time, (median of the last _AROUND_STEPS, of the last
        # _AROUND_HOLD) before, steps after]
        # (a deque from the first kept step on: an empty one is a 64-slot block, and a rank in its
        # warm-up steps feeds none)
        self._recent_values: Union[tuple, collections.deque] = ()
        self._windows: Union[tuple, collections.deque] = ()  # a deque from the first window on

    def feed(self, step: int, time: float, value: float) -> bool:
        if not finite_positive(value):
            return False
        if self.first_time is None:
            self.first_time = time
        moderate = self._level_moved or (bool(self._held) and self.level is not None and
                                         math.log(self._held[0][2]) - self.level < 2 * self._clip)
        limit = self._clip / 2 if moderate else self._clip
        outlier = self.level is not None and math.log(value) - self.level >= limit
        if not outlier:
            self._level_moved = False
            if moderate and len(self._held) >= self.cfg.min_bucket_steps:
                # a run of moderately slower steps that one quicker step broke is a change
                # wobbling around the pause limit (an H200 job 11 -> 16 ms: its first 81 steps
                # would be dropped as a "pause" and the onset dated 82 steps late), not a pause
                changed = self._keep_held()
                return self._add(step, time, value) or changed
            self._end_pause()
        elif not self._level_moved:
            self._held.append((step, time, value))
            if len(self._held) < self.cfg.max_pause_steps:
                return False
            self._level_moved = True  # no pause lasts this long: the level moved
            return self._keep_held()
        return self._add(step, time, value)

    def _keep_held(self) -> bool:
        """The held run's steps into the buckets after all (a level change, not a pause)."""
        held, self._held = self._held, []
        return any([self._add(*h) for h in held])

    def feed_many(self, step: list, end_time_s: list, duration_s: list) -> bool:
        """:meth:`feed` for each (a batch, as columns). A run of plain steps (finite, under the
        pause limit, no pause held, inside one bucket) goes into the bucket at once; anything
        else takes the step-by-step path."""
        changed, n = False, len(duration_s)
        if not n:
            return False
        if self.first_time is None:
            self.first_time = end_time_s[0]
        start = self._bucket_start[1] if self._bucket_start else end_time_s[0]
        limit = start + self.cfg.bucket_s  # steps ending before this cannot close the bucket
        j = bisect.bisect_left(end_time_s, limit)  # (times arrive in order; a clock step only ends a bucket late)
        if j:
            part = duration_s[:j]
            low, high, total = min(part), max(part), sum(part)
            if not (self._held or self._level_moved or not low > 0 or not math.isfinite(total)
                    or (self.level is not None and math.log(high) - self.level >= self._clip / 2)):
                if self._bucket_start is None:
                    self._bucket_start = (step[0], end_time_s[0])
                self._bucket.extend(part)
                self._recent().extend(part)
                if self._windows:
                    self._after_window(part)
            else:
                j = 0
        for k in range(j, n):
            changed |= self.feed(step[k], end_time_s[k], duration_s[k])
        return changed

    def _end_pause(self) -> None:
        if self._held:
            kind = "stall" if len(self._held) == 1 else "pause"
            self.pauses[kind] = self.pauses.get(kind, 0) + 1
            self._held = []

    def _add(self, step: int, time: float, value: float) -> bool:
        if self._bucket_start is None:
            self._bucket_start = (step, time)
        self._bucket.append(value)
        (self._recent_values or self._recent()).append(value)
        if self._windows:
            self._after_window([value])
        if time - self._bucket_start[1] < self.cfg.bucket_s or len(self._bucket) < self.cfg.min_bucket_steps:
            return False
        y, first = math.log(self._summary(self._bucket)), self._bucket_start[0]
        self._bucket, self._bucket_start = [], None
        return self._on_bucket(self._owner(), first, time, y)

    def _recent(self) -> collections.deque:
        """The recent values' deque, made at the first."""
        if not self._recent_values:
            self._recent_values = collections.deque(maxlen=_AROUND_HOLD)
        return self._recent_values

    def _summary(self, values: list) -> float:
        q = self.quantile
        if q == 0.5:
            return math.fsum(values) / len(values) if self.cfg.bucket_mean else median(values)
        s = sorted(values)
        x = q * (len(s) - 1)
        i = int(x)
        return s[i] if i + 1 >= len(s) else s[i] + (x - i) * (s[i + 1] - s[i])

    # -- the agent's profiler windows -----------------------------------------------------------
    def note_window(self, step: int, time: float) -> None:
        """A profiler window of the agent's ended at ``step`` (its last profiled step, Unix
        ``time``): the kept steps before it are noted, those after it gathered."""
        recent = list(self._recent_values)
        before = (median(recent[-_AROUND_STEPS:]), median(recent)) if len(recent) >= 5 else None
        if not self._windows:
            self._windows = collections.deque(maxlen=8)
        self._windows.append([step, time, before, []])

    def _after_window(self, values: list) -> None:
        for w in self._windows:
            if len(w[3]) < _AROUND_HOLD:
                w[3].extend(values[:_AROUND_HOLD - len(w[3])])

    def window_at(self, onset: float, shift: float) -> Optional[int]:
        """The end step of a profiler window near ``onset`` after which the kept steps jumped by
        at least half ``shift`` (log units) at once and held there (the same jump over
        ``_AROUND_HOLD`` steps either side, where that many are known), or None. A change of the
        job's own that lands near a window by chance shows no such jump at the window's end."""
        slack, least = 2 * self.cfg.bucket_s, max(shift / 2, 0.01)
        for step, time, before, after in reversed(self._windows):
            if before and len(after) >= _AROUND_STEPS // 2 and onset - slack <= time <= onset + slack + self.cfg.bucket_s:
                held = len(after) < _AROUND_HOLD // 2 or math.log(median(after) / before[1]) >= least
                if math.log(median(after[:_AROUND_STEPS]) / before[0]) >= least and held:
                    return int(step)
        return None
