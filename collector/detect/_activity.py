"""A rank whose GPU does more work than the job's other ranks', from the always-on NVML GPM
counters: no profiler window, no step hook, no cost on the training process (the sidecar reads
them once a second).

In data-parallel training every rank runs the same kernels, so the share of time each GPU's
compute pipes are busy (GPM tensor + FP16 + FP32 + FP64 activity, summed) is the same on every
rank. On the real 2- and 4-GPU NCCL recordings in tests/data/real (H100 and H200, ~9-50 ms
steps) a healthy rank's 5 s median stood within 0.95-1.05x of the other ranks' median for
minutes, never two buckets in a row outside that; single buckets reached 1.10x, 1.18x (a
data-loader change landing in one) and 1.48x (a profiler window asked of one rank). Extra GPU
work on one rank (more GEMMs, a GPU that takes longer for the same kernels) raises its share
and lowers the others': they wait in NCCL kernels, which barely use those pipes. GEMMs injected
into one rank's backward: 1.26x (a host-bound 48 ms job, where the job slowed only 2-6%) to
1.64x (~13 ms jobs). Host-side causes (a busy training thread, a slow data loader) leave the
shares even: they are the phase times' to name.

The rule, per job: each rank's samples are taken as ``activity_bucket_s`` medians, aligned on
the wall clock; a bucket is judged once every rank has sent a later sample, or when some rank is
``_LAG`` buckets further on (a rank that stopped sending holds no one for long). A rank's ratio
is its median over the others' median (both floored at ``activity_floor``: idle GPUs are
even). Its reference is the median of its first ``activity_reference_buckets`` ratios after
``activity_warmup_s`` from its first sample; it is flagged when its ratio stands
``activity_rise`` or more above that in each of its last ``activity_buckets`` buckets, and
cleared when each of them is back under half of that. A bucket counts for a rank only while it
trained: its kept steps (pauses, marked phases and warm-up are left out before they come here)
fill most of the time around it, so ``if rank == 0: evaluate()`` with the others waiting, a
checkpoint or a stall is not compared. A rank busier from the start (a shared GPU, a pipeline
stage with more work) is learnt in its reference and left to the step, phase and window
evidence; so is one busier when the collector restarts (the reference is not persisted: two
minutes to learn again). Not thread-safe; O(ranks log ranks) per judged bucket plus a scan of
each rank's last ~40 batch marks; on the collector's ingest path +0.3-1.0 us per step, 4-11%
(bench/results/ingest_activity.md).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable, Optional

from ._types import finite_positive, median, medians_without_each

__all__ = ["ActivitySkew", "ActivityFlag"]

_BUSIER = "GPU is busier than the other ranks'"  # (its condition says so in Condition.found, not here)

_LAG = 6  # buckets a bucket waits for a rank that has not moved past it
_BEFORE = 6      # buckets before a flag's onset that give the job's step level before it
_STEPS_KEPT = 128  # (time, step) per batch kept per rank: at one batch a second, two minutes
_TRAINING = 0.6    # a bucket counts for a rank whose kept steps fill this share of it (_training)


@dataclasses.dataclass
class ActivityFlag:
    """A rank flagged as busier: when it began (data time, the first bucket of the run),
    the rank's step then, and the figures of the last bucket that showed the skew."""
    since: float
    step: Optional[int]
    own: float
    others: float
    ratio: float
    reference: float
    seconds: float
    level_before: Optional[float] = None  # the job's step time (s) in the half minute before ``since``
    level_now: Optional[float] = None     # ... and at the last bucket that showed the skew

    def summary(self, rank: int) -> str:
        cost = ""
        if self.level_before and self.level_now:
            cost = (f"; the job's step {self.level_before * 1e3:.1f} -> {self.level_now * 1e3:.1f} ms "
                    f"({self.level_now / self.level_before - 1:+.1%})")
        return (f"rank {rank}'s {_BUSIER}: its compute pipes (tensor + FP, "
                f"NVML GPM) active {self.own:.0%} of the time vs {self.others:.0%} on the others "
                f"({self.ratio:.2f}x; {self.reference:.2f}x when the job settled) for {self.seconds:.0f} s; "
                f"the others wait for it in the collectives{cost}")


class _Rank:
    __slots__ = ("first", "latest", "refs", "reference", "hist")

    def __init__(self, first: float, buckets: int):
        self.first = first                  # data time of its first sample
        self.latest = -1                    # its newest bucket with a sample
        self.refs: list = []                # its first ratios, until the reference is known
        self.reference: Optional[float] = None
        self.hist = collections.deque(maxlen=buckets)  # (ratio - reference, bucket start)


class ActivitySkew:
    """``feed`` returns True when a rank was flagged or cleared; ``flags`` is {rank: ActivityFlag}."""

    def __init__(self, bucket_s: float, warmup_s: float, reference_buckets: int, buckets: int,
                 rise: float, floor: float):
        self.bucket_s, self.warmup_s = bucket_s, warmup_s
        self.reference_buckets, self.buckets, self.rise, self.floor = reference_buckets, buckets, rise, floor
        self._ranks: dict[int, _Rank] = {}
        self._open: dict[int, dict[int, list]] = {}  # bucket -> rank -> samples
        self._judged = -1  # the newest bucket judged: later samples of older buckets are dropped
        self.flags: dict[int, ActivityFlag] = {}
        # (bucket start, the job's step level then) of the last buckets judged: a flag's cost
        self._levels: collections.deque = collections.deque(maxlen=buckets + _LAG + _BEFORE)
        # rank -> (data time, step) of its last batches (kept by the caller): a flag's onset step
        self.steps: dict[int, collections.deque] = {}

    def feed(self, rank: int, times: list, values: list, level: Callable[[], Optional[float]]) -> bool:
        """``rank``'s samples (data times, summed pipe activity 0-4 or None); ``level()``: the
        job's step time now (seconds, None when not known), asked once per bucket judged and
        kept with it."""
        r = None
        for t, v in zip(times, values):
            if v is None or not (math.isfinite(v) and v >= 0.0) or not finite_positive(t):
                continue
            if r is None:
                r = self._ranks.get(rank)
                if r is None:
                    r = self._ranks[rank] = _Rank(t, self.buckets)
            bid = int(t // self.bucket_s)
            if bid <= self._judged or t < r.first + self.warmup_s:
                continue
            self._open.setdefault(bid, {}).setdefault(rank, []).append(v)
            r.latest = max(r.latest, bid)
        changed = False
        while self._open:
            bid = min(self._open)
            newest = [x.latest for x in self._ranks.values()]
            if min(newest) <= bid and max(newest) - bid <= _LAG:
                break
            vals = self._open.pop(bid)
            self._judged = bid
            now = level()
            self._levels.append((bid * self.bucket_s, now))
            if len(vals) >= 2:
                changed |= self._judge(bid, {q: median(v) for q, v in vals.items()}, now)
        return changed

    def step(self, rank: int, time: float, step: int) -> None:
        """``rank``'s newest step and its data time (once a batch; one a second is kept)."""
        seen = self.steps.get(rank)
        if seen is None:
            seen = self.steps[rank] = collections.deque(maxlen=_STEPS_KEPT)
        if not seen or time >= seen[-1][0] + 1.0:  # (fed step by step: one a second is kept)
            seen.append((time, step))

    def _training(self, rank: int, start: float, end: float, period: Optional[float]) -> bool:
        """Whether ``rank`` trained through [start, end): its steps kept upstream (a pause, a
        marked phase or warm-up is left out there) between its last batch before ``start`` and
        its first at or after ``end`` (its last so far when none is), at its usual seconds per
        step (``period``: the job's step time, None when not known), fill at least _TRAINING of
        the time between those batches. An evaluation run on one rank while the others wait, a
        checkpoint or a stall hold no kept steps (its step around them is one long step, left
        out): their GPU activity is not the training's."""
        seen = self.steps.get(rank)
        if not seen or not period:
            return False
        after = prev = None
        for t, s in reversed(seen):  # (the newest first: the buckets judged are the last ones)
            if t < start:
                prev = (t, s)
                break
            if after is None or t >= end:
                after = (t, s)
        if after is None or prev is None or after[0] < start:
            return False
        return (after[1] - prev[1]) * period >= _TRAINING * (after[0] - prev[0])

    def _step_at(self, rank: int, time: float) -> Optional[int]:
        """The rank's first step kept at or after ``time`` (its newest when none is)."""
        seen = self.steps.get(rank)
        if not seen:
            return None
        return next((s for t, s in seen if t >= time), seen[-1][1])

    def forget(self, rank: int) -> bool:
        self._ranks.pop(rank, None)
        self.steps.pop(rank, None)
        for vals in self._open.values():
            vals.pop(rank, None)
        return self.flags.pop(rank, None) is not None

    def _before(self, since: float) -> Optional[float]:
        """The median of the job's step levels kept for the buckets in the half minute before ``since``."""
        kept = [v for t, v in self._levels if since - _BEFORE * self.bucket_s <= t < since and v]
        return median(kept) if kept else None

    def _judge(self, bid: int, meds: dict, level: Optional[float]) -> bool:
        start = bid * self.bucket_s
        ranks = [q for q in meds if self._training(q, start, start + self.bucket_s, level)]
        if len(ranks) < 2:
            return False
        others = medians_without_each([meds[q] for q in ranks])
        changed = False
        for q, o in zip(ranks, others):
            own = meds[q]
            ratio = max(own, self.floor) / max(o, self.floor)
            r = self._ranks[q]
            if r.reference is None:
                r.refs.append(ratio)
                if len(r.refs) >= self.reference_buckets:
                    r.reference, r.refs = median(r.refs), []
                continue
            dev = ratio - r.reference
            r.hist.append((dev, start))
            full = len(r.hist) == r.hist.maxlen
            f = self.flags.get(q)
            if f is None:
                if full and all(d >= self.rise for d, _ in r.hist):
                    since = r.hist[0][1]
                    f = self.flags[q] = ActivityFlag(since, self._step_at(q, since), own, o, ratio,
                                                     r.reference, 0.0, self._before(since))
                    changed = True
            elif full and all(d < self.rise / 2 for d, _ in r.hist):
                del self.flags[q]
                f, changed = None, True
            if f is not None and dev >= self.rise:
                f.own, f.others, f.ratio, f.seconds = own, o, ratio, start + self.bucket_s - f.since
                f.level_now = level
        return changed
