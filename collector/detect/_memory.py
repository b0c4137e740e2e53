"""Memory rules of one rank: fragmentation, alloc retries, OOM, leak trend, exhaustion forecast.

Fed allocator (``torch.cuda.memory_stats``), NVML and host samples; times are the samples'
Unix seconds. Device fullness is NVML used/total when an NVML sample from the last 30 s has
both, else allocator reserved/device total (NVML also sees memory outside the caching
allocator: other processes, NCCL buffers, the CUDA context). Not thread-safe.
"""

from __future__ import annotations

import bisect
import collections
import math
import operator
from typing import Optional, Union

from ._config import MemoryConfig
from ._names import (ALLOC_RETRIES, ALLOCATOR_FRAGMENTATION, GPU_MEMORY_LEAK, HOST_MEMORY_LEAK, MEMORY_EXHAUSTION_FORECAST,
                     OOM)
from ._types import CRITICAL, WARNING, AllocatorPoint, Condition, GpuPoint, HostPoint, fmt_bytes, median

__all__ = ["MemoryDetector", "Trend", "Trends"]

_NVML_FRESH_S = 30.0
# conditions a held allocator sample can end or keep: while one is held, every sample is judged
_ALLOCATOR_HELD = frozenset((ALLOC_RETRIES, OOM, ALLOCATOR_FRAGMENTATION))


def segment_bounds(times: tuple, n_seg: int) -> list:
    """Where each of ``n_seg`` equal spans of rising ``times`` starts: [0, first index of
    segment 1, ..., len(times)], a point's segment being min(n_seg - 1, int((t - t0) / span x
    n_seg)). Each bound is found by bisection near t0 + k x span / n_seg, then made exact by
    that rule. (With a Python pass putting every point in its segment, a leak judgement of 116
    points took 22 us on the development machine, now 10; it runs at every kept point of a
    breathing series.)"""
    t0, n = times[0], len(times)
    span = times[-1] - t0

    def segment(t: float) -> int:  # non-decreasing in t
        return min(n_seg - 1, int((t - t0) / span * n_seg))
    cuts = [0]
    for k in range(1, n_seg):
        i = bisect.bisect_left(times, t0 + k * span / n_seg)
        while i > cuts[-1] and segment(times[i - 1]) >= k:
            i -= 1
        while i < n and segment(times[i]) < k:
            i += 1
        cuts.append(i)
    cuts.append(n)
    return cuts


class Trend:
    """Growth of one series over ``window_s``: kept points are at least window/120 s apart.
    The window's largest and smallest values are kept as it slides (monotone queues), so a
    series that has not moved by the least growth that could count (most of them) is judged
    in O(1), not by the segment medians over every kept point."""

    def __init__(self, window_s: float, segments: int, min_growth: float, min_capacity_share: float = 0.0):
        self.window_s, self.segments, self.min_growth = window_s, segments, min_growth
        self.min_capacity_share = min_capacity_share
        # the kept points, and the (time, value) of those that are the window's largest
        # (smallest) from there on: deques from the first point on (an empty deque holds a
        # 64-slot block, ~600 B; a rank without host or NVML samples never feeds its trends)
        self._pts: Union[tuple, collections.deque] = ()
        self._highs: Union[tuple, collections.deque] = ()
        self._lows: Union[tuple, collections.deque] = ()

    def add(self, t: float, v: float) -> bool:
        """Record a point; True when a point was kept (the verdict may have changed). A point
        more than a gap before the last kept one (the rank's clock stepped back, or the point
        before was stamped ahead of it) drops the kept points from its time on: a sample stamped
        an hour ahead once must not make every real one after it "too close" for an hour."""
        gap = self.window_s / 120
        if self._pts and t < self._pts[-1][0] - gap:
            self._restart_before(t)
        if self._pts and t - self._pts[-1][0] < gap:
            return False
        point = (t, float(v))
        if not self._pts:
            self._pts, self._highs, self._lows = collections.deque(), collections.deque(), collections.deque()
        self._pts.append(point)
        highs, lows = self._highs, self._lows
        while highs and highs[-1][1] <= point[1]:
            highs.pop()
        highs.append(point)
        while lows and lows[-1][1] >= point[1]:
            lows.pop()
        lows.append(point)
        while self._pts and t - self._pts[0][0] > self.window_s:
            first = self._pts.popleft()[0]  # kept times rise: a queue's head is the oldest
            if highs[0][0] == first:
                highs.popleft()
            if lows[0][0] == first:
                lows.popleft()
        return True

    def _restart_before(self, t: float) -> None:
        """Keep only the points before ``t``, and the window's extremes among them."""
        self._pts = collections.deque(p for p in self._pts if p[0] < t)
        self._highs.clear()
        self._lows.clear()
        for point in self._pts:
            while self._highs and self._highs[-1][1] <= point[1]:
                self._highs.pop()
            self._highs.append(point)
            while self._lows and self._lows[-1][1] >= point[1]:
                self._lows.pop()
            self._lows.append(point)

    def due(self, times: list) -> list:
        """Indices of the ``times`` (in order) that :meth:`add` would keep: nothing else in a
        batch changes the trend (the others are too close to the point kept before them; a
        time more than a gap before the last kept one restarts it, :meth:`add`)."""
        gap, pts = self.window_s / 120, self._pts
        last = pts[-1][0] if pts else None
        if last is not None and max(times) - last < gap and min(times) >= last - gap:  # the usual batch: none
            return []
        kept = []
        for i, t in enumerate(times):
            if last is None or t - last >= gap or t < last - gap:
                kept.append(i)
                last = t
        return kept

    def growth(self, capacity: Optional[float] = None) -> Optional[tuple[float, float, float]]:
        """(growth in value units over the window, start level, slope per second) when every
        segment median is >= the one before and the total growth is >= ``min_growth`` x start
        or >= ``min_capacity_share`` x ``capacity`` (a slow leak on a large device)."""
        pts = self._pts
        if len(pts) < 2 * self.segments or pts[-1][0] - pts[0][0] < 0.9 * self.window_s:
            return None
        # The growth is a difference of two segment medians, at most the window's range; it
        # counts from min_growth x the first median (>= the smallest value) or the capacity share.
        low = self._lows[0][1]
        need = self.min_growth * low if low > 0 else 0.0
        if capacity is not None and self.min_capacity_share > 0:
            need = min(need, self.min_capacity_share * capacity)
        if self._highs[0][1] - low < need:
            return None
        return self._judge(capacity)

    def _judge(self, capacity: Optional[float]) -> Optional[tuple[float, float, float]]:
        """:meth:`growth` from the segment medians of every kept point (enough points, span)."""
        pts, n_seg = self._pts, self.segments
        times, values = zip(*pts)
        cuts = segment_bounds(times, n_seg)
        if any(a == b for a, b in zip(cuts, cuts[1:])):
            return None  # an empty segment
        segs = [values[a:b] for a, b in zip(cuts, cuts[1:])]
        first, last = median(segs[0]), median(segs[-1])
        grow = last - first
        # Rising medians, each allowed to dip by the mean rise per segment (sampling
        # noise on a slow leak); with no growth the allowance is nil. Judged segment by
        # segment: a breathing series usually fails within the first few.
        slack = max(0.0, grow) / self.segments
        meds = [first]
        for seg in segs[1:-1]:
            m = median(seg)
            if m < meds[-1] - slack:
                return None
            meds.append(m)
        if last < meds[-1] - slack:
            return None
        meds.append(last)
        # ... and the rise must stand out of the sampling noise: 4 standard errors of the
        # difference of two segment medians (noise from the spread around each segment's median).
        spread = [abs(v - m) for seg, m in zip(segs, meds) for v in seg]
        sigma = 1.4826 * median(spread)
        if grow < 4 * 1.2533 * sigma * math.sqrt(2 / min(len(seg) for seg in segs)):
            return None
        by_capacity = capacity is not None and self.min_capacity_share > 0 and \
            grow >= self.min_capacity_share * capacity
        if meds[0] <= 0 or (grow < self.min_growth * meds[0] and not by_capacity):
            return None
        n = len(pts)
        mt, mv = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
        slope = sum((t - mt) * (v - mv) for t, v in pts) / max(1e-12, sum((t - mt) ** 2 for t, _ in pts))
        return grow, meds[0], slope


class Trends:
    """One series judged over ``leak_window_s`` and, when set, the longer
    ``leak_long_window_s`` (a slow leak on a large allocation grows less than the least growth
    over the short window: 3 GiB/h on 15.6 GB allocated is +8% in 25 min, +32% in 100)."""

    def __init__(self, cfg) -> None:
        shape = (cfg.leak_segments, cfg.leak_min_growth_ratio, cfg.leak_min_capacity_ratio)
        self.trends = [Trend(cfg.leak_window_s, *shape)]
        if cfg.leak_long_window_s > cfg.leak_window_s:
            self.trends.append(Trend(cfg.leak_long_window_s, *shape))

    def add(self, t: float, v: float) -> bool:
        kept = False
        for trend in self.trends:
            kept |= trend.add(t, v)
        return kept

    def due(self, times: list) -> list:
        if len(self.trends) == 1:
            return self.trends[0].due(times)
        return sorted(set().union(*(trend.due(times) for trend in self.trends)))

    def growth(self, capacity: Optional[float] = None) -> Optional[tuple[float, float, float, float]]:
        """:meth:`Trend.growth` of the shortest window that shows it, and that window."""
        for trend in self.trends:
            g = trend.growth(capacity)
            if g is not None:
                return (*g, trend.window_s)
        return None


class MemoryDetector:
    """``conditions`` maps alertname to the active Condition; feeds return True on a change."""

    def __init__(self, cfg: MemoryConfig, job: str, rank: int):
        self.cfg, self.job, self.rank = cfg, job, rank
        self.conditions: dict[str, Condition] = {}
        self._alloc: Optional[AllocatorPoint] = None
        self._gpu: Optional[GpuPoint] = None
        self._until = {ALLOC_RETRIES: 0.0, OOM: 0.0}
        self._gpu_trend, self._host_trend = Trends(cfg), Trends(cfg)
        self.step: Optional[int] = None

    def _set(self, name: str, severity: Optional[str], summary: str, since: float, for_s: float) -> bool:
        old = self.conditions.get(name)
        if severity is None:
            return self.conditions.pop(name, None) is not None
        since = old.since if old is not None else since
        self.conditions[name] = Condition(name, self.job, self.rank, severity, summary, since, self.step, for_s)
        return old is None or old.severity != severity

    def _fullness(self, p: AllocatorPoint) -> float:
        g = self._gpu
        if g is not None and g.memory_used_bytes and g.memory_total_bytes and abs(g.time - p.time) <= _NVML_FRESH_S:
            return g.memory_used_bytes / g.memory_total_bytes
        return p.reserved_bytes / p.device_total_bytes if p.device_total_bytes else 0.0

    def allocator(self, p: AllocatorPoint) -> bool:
        prev, self._alloc = self._alloc, p
        changed = self._fragmentation(p)
        if prev is not None and (p.alloc_retries > prev.alloc_retries or p.ooms > prev.ooms):
            for name, now_v, prev_v, sev, hold in (
                    (ALLOC_RETRIES, p.alloc_retries, prev.alloc_retries, WARNING, self.cfg.retry_hold_s),
                    (OOM, p.ooms, prev.ooms, CRITICAL, self.cfg.oom_hold_s)):
                if now_v > prev_v:
                    self._until[name] = p.time + hold
                    what = "cudaMalloc retries (cache flushes)" if sev == WARNING else "CUDA out-of-memory errors"
                    changed |= self._set(name, sev, f"{what} +{now_v - prev_v} (total {now_v}); "
                                         f"reserved {fmt_bytes(p.reserved_bytes)} of {fmt_bytes(p.device_total_bytes)}",
                                         p.time, 0.0)
        if self.conditions:  # (a hold ends only for a condition held)
            changed |= self.tick(p.time)
        if self._gpu_trend.add(p.time, p.allocated_bytes):
            changed |= self._leak(GPU_MEMORY_LEAK, "GPU allocated memory", self._gpu_trend,
                                  p.allocated_bytes, p.device_total_bytes or None, p.time)
        return changed

    def allocators_due(self, times: list, reserved: list, split: list, retries: list, ooms: list) -> Optional[list]:
        """A batch of allocator samples as columns: the indices of the samples that give the
        leak trend a point, when those are all that feeding them one by one could change
        (nothing held, no counter moved, no sample fragmented past the ratio: the usual batch);
        None when the batch must be fed sample by sample."""
        prev, n = self._alloc, len(times)
        if (prev is None or not self.conditions.keys().isdisjoint(_ALLOCATOR_HELD)
                or retries.count(prev.alloc_retries) != n or ooms.count(prev.ooms) != n
                or not min(reserved) > 0
                or not max(map(operator.truediv, split, reserved)) < self.cfg.fragmentation_ratio):
            return None
        return self._gpu_trend.due(times)

    def keep_allocator(self, p: AllocatorPoint) -> None:
        """``p`` (a batch's last sample) as the one the next sample's counters compare with."""
        self._alloc = p

    def host_due(self, times: list) -> list:
        """The indices of a batch's host samples that give the host trend a point (nothing else
        is kept of a host sample)."""
        return self._host_trend.due(times)

    def _fragmentation(self, p: AllocatorPoint) -> bool:
        cfg, active = self.cfg, ALLOCATOR_FRAGMENTATION in self.conditions
        frag = p.inactive_split_bytes / p.reserved_bytes if p.reserved_bytes else 0.0
        if not active and frag < cfg.fragmentation_ratio:
            return False  # the usual sample: nothing to raise, nothing held
        full = self._fullness(p)
        hold = 0.8 if active else 1.0
        if frag >= hold * cfg.fragmentation_ratio and full >= cfg.near_capacity_ratio - (0.05 if active else 0):
            summary = (f"allocator fragmentation {frag:.0%}: {fmt_bytes(p.inactive_split_bytes)} inactive split of "
                       f"{fmt_bytes(p.reserved_bytes)} reserved ({fmt_bytes(p.allocated_bytes)} allocated) "
                       f"while device memory is {full:.0%} full")
            return self._set(ALLOCATOR_FRAGMENTATION, WARNING, summary, p.time, cfg.fragmentation_for_s)
        return self._set(ALLOCATOR_FRAGMENTATION, None, "", p.time, 0)

    def gpu(self, p: GpuPoint) -> bool:
        self._gpu = p
        return False

    def host(self, p: HostPoint, available: Optional[int]) -> bool:
        if not self._host_trend.add(p.time, p.resident_memory_bytes):
            return False
        cap = p.resident_memory_bytes + available if available is not None else None
        return self._leak(HOST_MEMORY_LEAK, "host resident memory", self._host_trend,
                          p.resident_memory_bytes, cap, p.time)

    def _leak(self, name: str, what: str, trend: Trends, current: float, capacity: Optional[float], t: float) -> bool:
        g = trend.growth(capacity)
        if g is None:
            return self._set(name, None, "", t, 0) | self._forecast(what, None, "", t)
        grow, start, slope, window_s = g
        tte = (capacity - current) / slope if capacity and slope > 0 else None
        eta = f"; full in ~{tte / 60:.0f} min at this rate" if tte is not None else ""
        summary = (f"{what} grows without bound: +{fmt_bytes(grow)} (+{grow / start:.0%}) over "
                   f"{window_s / 60:.0f} min, {fmt_bytes(slope * 60)}/min{eta}")
        soon = tte is not None and tte <= self.cfg.forecast_horizon_s
        return (self._set(name, WARNING, summary, t, self.cfg.leak_for_s)
                | self._forecast(what, CRITICAL if soon else None, summary, t))

    def _forecast(self, what: str, severity: Optional[str], summary: str, t: float) -> bool:
        """One forecast alert per rank; a source only clears the forecast it raised."""
        name, old = MEMORY_EXHAUSTION_FORECAST, self.conditions.get(MEMORY_EXHAUSTION_FORECAST)
        if severity is None and (old is None or not old.summary.startswith(what)):
            return False
        return self._set(name, severity, summary, t, 0.0)

    def tick(self, now: float) -> bool:
        """Expire the retry/OOM holds at data time ``now``."""
        changed = False
        for name, until in self._until.items():
            if name in self.conditions and now >= until:
                changed |= self._set(name, None, "", now, 0)
        return changed
