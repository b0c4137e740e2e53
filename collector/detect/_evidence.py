"""What a rank's step-time shift is made of: the evidence drift decides with.

Per rank, :class:`RankEvidence` keeps 5-second blocks (by the data's own times) of what the
agent measures beside the step time: the data-loader wait of every step, the device time of
each phase (data, forward, backward, sync, optimizer) of the sampled steps, and the caching
allocator's cudaMalloc + cudaFree calls. :meth:`RankEvidence.backing` compares the blocks
before a shift's onset with those after it and returns a :class:`Backing` (typed, named
values) when one of them holds the change:

- **a phase**: its device time grew by at least ``_SHARE`` of the step's growth, by a share of
  its own time at least ``_CONCENTRATED`` x the share by which the other phases together grew.
  A host or GPU that wanders slows every phase alike (a launch-bound H200 job whose host
  slowed: forward, backward and optimizer +13..19% each): that concentration is absent;
- **the data-loader wait**: it grew by at least ``_SHARE`` of the step's growth;
- **allocator churn**: cudaMalloc + cudaFree calls per step rose by at least 1 to 3x the rate
  before (``torch.cuda.empty_cache()`` every step; each call waits on the host).

None when nothing holds it, or when the blocks cannot tell (fewer than ``_MIN_BLOCKS`` blocks
with phase samples on a side, no wait, no allocator samples): ``Backing.unknown`` says which.
A shift with a backing is a change of the job (drift raises it whatever came before); one
without is where the quieting rules (waves, settling again) apply.

Memory: three rings of at most ``_BLOCKS`` rows (30 minutes), about 40 KB per rank once full.
Feeding is O(1) amortised per step and sample; :meth:`backing` reads the blocks of the spans
asked (a few hundred rows). One caller at a time.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .._ring import Ring
from ._types import Backing, median

__all__ = ["Backing", "RankEvidence", "PHASES"]

PHASES = ("data", "forward", "backward", "sync", "optimizer")
_BLOCK_S = 5.0
_BLOCKS = 360            # 30 minutes of 5 s blocks per ring
_MIN_BLOCKS = 3          # blocks on each side of the onset for a phase or wait comparison
_MIN_SAMPLES = 6         # phase samples on each side
_SHARE = 0.5             # of the step's growth that one source must hold
_CONCENTRATED = 2.5      # a phase grew by this many times the share the other phases grew by
_CHURN_MORE, _CHURN_TIMES = 1.0, 3.0  # allocator calls per step: at least +1 and 3x
_ALL_SEEN = 0b1111       # a phase sample whose four points were seen: each phase apart


class RankEvidence:
    """The evidence of one rank, in 5 s blocks: wait (end time, mean wait s, steps), phases
    (end time, samples, points, 5 device medians s), allocator (time, cumulative calls)."""

    __slots__ = ("waits", "phases", "alloc", "_wait", "_phase", "_phase_end")

    def __init__(self) -> None:
        self.waits = Ring("ddQ", _BLOCKS)
        self.phases = Ring("dQQddddd", _BLOCKS)
        self.alloc = Ring("dd", _BLOCKS)
        self._wait: list = [0.0, 0.0, 0]  # the open block: its end time, wait sum, steps
        self._phase: list = []             # the open block's samples: (points, 5 device s)
        self._phase_end = 0.0

    # -- feeding --------------------------------------------------------------------------------
    def steps(self, end_time_s: Sequence[float], dataloader_wait_s: Sequence[float]) -> None:
        """The kept steps' end times and loader waits, in order."""
        w = self._wait
        for t, wait in zip(end_time_s, dataloader_wait_s):
            if w[2] and t >= w[0]:
                self.waits.append(w[0], w[1] / w[2], w[2])
                w[1] = w[2] = 0
            if not w[2]:
                w[0] = t + _BLOCK_S
            w[1] += wait
            w[2] += 1

    def phase_samples(self, end_time_s: Sequence[float], points: Sequence[int], device: Sequence[list]) -> None:
        """Sampled steps' phase times (``device``: five columns of seconds, :data:`PHASES`)."""
        for i, t in enumerate(end_time_s):
            if self._phase and t >= self._phase_end:
                self._close_phases()
            if not self._phase:
                self._phase_end = t + _BLOCK_S
            self._phase.append((points[i], [d[i] for d in device]))

    def _close_phases(self) -> None:
        rows = self._phase
        kind = max(set(p for p, _ in rows), key=lambda p: sum(1 for q, _ in rows if q == p))
        rows = [v for p, v in rows if p == kind]
        self.phases.append(self._phase_end, len(rows), kind, *[median([v[k] for v in rows]) for k in range(5)])
        self._phase = []

    def allocator(self, time_s: Sequence[float], calls: Sequence[float]) -> None:
        """Allocator samples: cumulative cudaMalloc + cudaFree calls; one kept per block."""
        for t, c in zip(time_s, calls):
            if not self.alloc or t >= self.alloc[-1][0] + _BLOCK_S:
                self.alloc.append(t, c)

    # -- reading --------------------------------------------------------------------------------
    def backing(self, lo: float, edge: float, since: float, now: float, step_s: float,
                delta_s: float) -> tuple[Optional[Backing], str]:
        """The evidence of a shift of ``delta_s`` seconds per step on a step of ``step_s``:
        before is data time ``lo..edge``, after ``since..now``. Returns (the backing or None,
        what could not be read: "" when every source was compared)."""
        if delta_s <= 0:
            return None, ""
        unknown = []
        found = self._phase_backing(lo, edge, since, now, delta_s)
        if found is None:
            unknown.append("phase times")
        best = found or None
        wait = self._wait_backing(lo, edge, since, now, delta_s)
        if wait is None:
            unknown.append("loader wait")
        elif wait and (best is None or wait.share > best.share):
            best = wait
        churn = self._churn(lo, edge, since, now, step_s)
        if churn is None:
            unknown.append("allocator calls")
        elif churn and best is None:
            best = churn
        return best, ", ".join(unknown)

    def grown(self, b: Backing, lo: float, edge: float, since: float, now: float, step_s: float) -> Optional[float]:
        """How much the source of ``b`` stands above its level of ``lo..edge`` over
        ``since..now``, in ``b``'s unit (None when the blocks cannot tell)."""
        if b.kind == "phase":
            k = PHASES.index(b.name)
            before = [r[3 + k] for r in self.phases if lo <= r[0] < edge]
            after = [r[3 + k] for r in self.phases if since <= r[0] <= now + _BLOCK_S]
            scale = 1e3
        elif b.kind == "loader":
            before = [r[1] for r in self.waits if lo <= r[0] < edge]
            after = [r[1] for r in self.waits if since <= r[0] <= now + _BLOCK_S]
            scale = 1e3
        else:
            rows = list(self.alloc)
            x = _rate([r for r in rows if lo <= r[0] < edge])
            y = _rate([r for r in rows if since <= r[0] <= now + _BLOCK_S])
            return None if x is None or y is None else (y - x) * step_s
        if not before or len(after) < 2:
            return None
        return (median(after) - median(before)) * scale

    def _phase_backing(self, lo, edge, since, now, delta_s):
        """A phase that holds the change (Backing), False when the phases were compared and none
        does, None when they cannot be (too few blocks of one kind of points on a side)."""
        after = [r for r in self.phases if since <= r[0] <= now + _BLOCK_S]
        if len(after) < _MIN_BLOCKS:
            return None
        kind = after[-1][2]
        after = [r for r in after if r[2] == kind]
        before = [r for r in self.phases if lo <= r[0] < edge and r[2] == kind]
        if (len(before) < _MIN_BLOCKS or len(after) < _MIN_BLOCKS or sum(r[1] for r in before) < _MIN_SAMPLES
                or sum(r[1] for r in after) < _MIN_SAMPLES):
            return None
        b = [median([r[3 + k] for r in before]) for k in range(5)]
        a = [median([r[3 + k] for r in after]) for k in range(5)]
        # phases not seen apart hold 0 and their time in the next seen: compared as they come
        grew = [y - x for x, y in zip(b, a)]
        k = max(range(5), key=lambda j: grew[j])
        d = grew[k]
        if d < _SHARE * delta_s or b[k] <= 0:
            return False
        rest_b = sum(b) - b[k]
        rest = sum(grew) - d
        own = d / b[k]
        if rest_b > 0 and rest > 0 and own < _CONCENTRATED * rest / rest_b:
            return False  # every phase grew alike: the host's or the GPU's wander, not a phase
        return Backing("phase", PHASES[k], b[k] * 1e3, a[k] * 1e3, "ms", d / delta_s)

    def _wait_backing(self, lo, edge, since, now, delta_s):
        before = [r[1] for r in self.waits if lo <= r[0] < edge]
        after = [r[1] for r in self.waits if since <= r[0] <= now + _BLOCK_S]
        if len(before) < _MIN_BLOCKS or len(after) < _MIN_BLOCKS:
            return None
        b, a = median(before), median(after)
        if a - b < _SHARE * delta_s:
            return False
        return Backing("loader", "data-loader wait", b * 1e3, a * 1e3, "ms", (a - b) / delta_s)

    def _churn(self, lo, edge, since, now, step_s):
        rows = list(self.alloc)
        before = _rate([r for r in rows if lo <= r[0] < edge])
        after = _rate([r for r in rows if since <= r[0] <= now + _BLOCK_S])
        if before is None or after is None:
            return None
        b, a = before * step_s, after * step_s  # calls per step
        if a - b < _CHURN_MORE or a < _CHURN_TIMES * b:
            return False
        return Backing("allocator", "allocator calls", b, a, "calls/step", 1.0)


def _rate(rows: list) -> Optional[float]:
    """Calls per second over cumulative samples ``rows`` (None under two, or a counter reset)."""
    if len(rows) < 2 or rows[-1][0] <= rows[0][0] or rows[-1][1] < rows[0][1]:
        return None
    return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])
