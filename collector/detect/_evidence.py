"""What a rank's step-time shift is made of: the evidence drift decides with.

Per rank, :class:`RankEvidence` keeps 5-second blocks (by the data's own times) of what the
agent measures beside the step time: the data-loader wait of every step, the device and host
time of each phase (data, forward, backward, sync, optimizer) of the sampled steps, the caching
allocator's cudaMalloc + cudaFree calls and the GPU's SM activity (GPM). :meth:`RankEvidence.backing`
compares the blocks before a shift's onset with those after it and returns a :class:`Backing`
(typed, named values) when one of them holds the change:

- **a phase**: its device time grew by at least ``_SHARE`` of the step's growth, by a share of
  its own time at least ``_CONCENTRATED`` x the share by which the other phases together grew,
  and, when its host time grew with it (host-paced), its host time by ``_CONCENTRATED`` x each
  other compute phase's (:func:`_concentrated`). A host or GPU that wanders slows every phase alike
  (a launch-bound H200 job whose host slowed: forward, backward and optimizer +13..19% each):
  that concentration is absent;
- **the device's own work** (every phase but sync) grew by ``_SHARE`` of the step's growth while
  the compute phases' host time (forward, backward, optimizer: data's is mostly a wait) grew by
  less than ``_HOST_GREW`` of it;
- **the data-loader wait**: it grew by at least ``_SHARE`` of the step's growth (``_WAIT_SHARE`` when it
  grew to ``_WAIT_TIMES`` its level: the phases after a wait run at the host's launch pace);
- **the GPU's busy time** per step (SM activity x step time) grew by ``_SHARE`` of it;
- **allocator churn**: cudaMalloc + cudaFree calls per step rose by at least 1 to 3x the rate
  before (``torch.cuda.empty_cache()`` every step; each call waits on the host).

None when nothing holds it, or when the blocks cannot tell (fewer than ``_MIN_BLOCKS`` blocks on
a side): the second value :meth:`RankEvidence.backing` returns names what could not be compared.
A shift with a backing is a change of the job (drift raises it whatever came before); one
without is where the quieting rules (waves, settling again) apply.

Memory: four rings of at most ``_BLOCKS`` rows (30 minutes), about 60 KB per rank once full.
Feeding is O(1) amortised per step and sample; :meth:`backing` reads the blocks of the spans
asked (a few hundred rows). One caller at a time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence

from .._ring import Ring
from ._evidence_noise import MIN_RUN, SourceNoise
from ._types import Backing, Kind, median

__all__ = ["Backing", "RankEvidence", "PHASES"]

# The sources of evidence that may not be readable around an onset (RankEvidence.backing)
PHASE_TIMES, LOADER_WAIT, ALLOCATOR_CALLS = "phase times", "loader wait", "allocator calls"

PHASES = ("data", "forward", "backward", "sync", "optimizer")
_DEVICE_COLUMNS = tuple(j for j in range(len(PHASES)) if PHASES[j] != "sync")  # the device's own work
_BLOCK_S = 5.0
_BLOCKS = 360            # 30 minutes of 5 s blocks per ring
_MIN_BLOCKS = 3          # blocks on each side of the onset for a phase or wait comparison
_MIN_SAMPLES = 6         # phase samples on each side
_SHARE = 0.5             # of the step's growth that one source must hold
# ... or the loader's wait, this share when it grew to _WAIT_TIMES its level before: a wait for
# data leaves the device idle, and the phases after it then run at the host's launch pace, so
# the step grows by more than the wait (a live H200 job whose loader slowed: wait 0.18 -> 1.9
# ms, 5-s means, step +4.1 ms, forward's host and device time +2 ms with it,
# tests/data/real/diag/h200zq); a host that slows its workers with it moved the wait by a
# fraction of its level (a 2 x H200 launch-bound job's data phase 1.2 -> 1.5 ms at +4%)
_WAIT_SHARE, _WAIT_TIMES = 0.3, 4.0
_CONCENTRATED = 2.5      # a phase grew by this many times the share the other phases grew by
_CHURN_MORE, _CHURN_TIMES = 1.0, 3.0  # allocator calls per step: at least +1 and 3x
_HOST_GREW = 0.6         # the phases' host time grown by this share of their device time's: host-bound
_LAUNCHED = 0.1          # a phase's device time beyond its host time under this share of it: launch-paced
# A phase its host paces is read in its own spreads only when it grew by at least this many times
# the share of the step by which the step grew: a host that runs slower makes each host-bound
# phase, and so the step, longer by at most the share by which it slowed, so a phase that grew
# several times faster than the step is more work in that phase, not a slower host (a live H200
# job's for-loop AdamW: optimizer 4.9 -> 8..11 ms, +60..120%, while the step grew +6..9%: 8-13x;
# a 2 x H200 host's +10% wave grew its host-bound forward alone by +2.7 ms of ~14 ms: about 2x;
# a live H100 job's 269 tiny operators grew forward +35% while the step grew +8..14%: 2.5-4x,
# raised 84 s after they began at 4x, 54 s at 3x, tests/data/real/diag/h100q)
_BEYOND_PACE = 3.0
# ... and only a compute phase: data's host time is mostly the wait for the loader, whose workers
# a busy host slows apart from the trainer's thread (a healthy 2 x H200 launch-bound job's data
# phase 1.2 -> 1.5 ms while the step rose +4% with its host)
_COMPUTE = ("forward", "backward", "optimizer")
# Carried across a collector restart (RankEvidence.saved_blocks): each ring's newest blocks over
# this span, as long as the level before an onset is read over (MIN_BEFORE_S) and a little more
_CARRIED = ("waits", "phases", "alloc", "busy")
_CARRIED_S = 150.0
_CARRIED_ROWS = int(_CARRIED_S / _BLOCK_S) + 2
_THIN = 3  # ... every third of them, the newest kept (a median over a span reads them as its own)
_DIGITS = {"t": 3, "d": 6, "r": 4}  # a column's decimals: times, seconds, ratios and counts


def _carried_types(ring: Ring) -> str:
    """The rounding of each of ``ring``'s columns: its time ("t"), steps or points ("Q"), the rest
    seconds ("d"), or a ratio or a count ("r": the GPU's activity, the allocator's calls)."""
    rest = ring.types[1:]
    return "t" + ("".join("Q" if t == "Q" else "d" for t in rest) if len(rest) > 1 else
                  "r" if rest == "d" else "Q")


class RankEvidence:
    """The evidence of one rank, in 5 s blocks: wait (end time, mean wait s, steps), phases
    (end time, samples, points, 5 device then 5 host medians s), allocator (time, cumulative
    calls)."""

    __slots__ = ("waits", "phases", "alloc", "busy", "noise", "_wait", "_phase", "_phase_end")

    def __init__(self) -> None:
        self.waits = Ring("ddQ", _BLOCKS)
        self.phases = Ring("dQQ" + "d" * 10, _BLOCKS)
        self.alloc = Ring("dd", _BLOCKS)
        self.busy = Ring("dd", _BLOCKS)  # (time, GPM SM activity) one sample per block
        self.noise = SourceNoise(_BLOCK_S)  # each source's own spread, for Backing.spreads
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

    def phase_samples(self, end_time_s: Sequence[float], points: Sequence[int], device: Sequence[list],
                      host: Sequence[list]) -> None:
        """Sampled steps' phase times (``device``, ``host``: five columns of seconds each,
        :data:`PHASES`, on the device's timeline and on the host's)."""
        for i, t in enumerate(end_time_s):
            if self._phase and t >= self._phase_end:
                self._close_phases()
            if not self._phase:
                self._phase_end = t + _BLOCK_S
            self._phase.append((points[i], [d[i] for d in device] + [h[i] for h in host]))

    def _close_phases(self) -> None:
        rows = self._phase
        kind = max(set(p for p, _ in rows), key=lambda p: sum(1 for q, _ in rows if q == p))
        rows = [v for p, v in rows if p == kind]
        self.phases.append(self._phase_end, len(rows), kind, *[median([v[k] for v in rows]) for k in range(10)])
        self._phase = []

    def allocator(self, time_s: Sequence[float], calls: Sequence[float]) -> None:
        """Allocator samples: cumulative cudaMalloc + cudaFree calls; one kept per block."""
        for t, c in zip(time_s, calls):
            if not self.alloc or t >= self.alloc[-1][0] + _BLOCK_S:
                self.alloc.append(t, c)

    def gpu(self, time_s: Sequence[float], sm_active: Sequence[Optional[float]]) -> None:
        """NVML samples' GPM SM activity (None where a sample has none); one kept per block."""
        for t, v in zip(time_s, sm_active):
            if v is not None and (not self.busy or t >= self.busy[-1][0] + _BLOCK_S):
                self.busy.append(t, v)

    # -- across a collector restart -------------------------------------------------------------
    def saved_blocks(self) -> dict:
        """The last ``_CARRIED_S`` of each ring's blocks (by its own newest block), column by
        column (times to the millisecond, seconds to the microsecond, ratios to 1e-4): what
        :meth:`restore_blocks` takes after a restart. A change that began just before a restart
        is then read against the blocks before its onset: on the held-out 2 x H200 job h200zb, a
        +10% backward pulse the collector was restarted 10 s into was never raised without them
        (the restarted rank held no block before the onset, so its evidence could not be
        compared), its host's wander too large for the step time alone. About 3 KB of JSON and
        ~0.1 ms a save (once a minute of data per rank at most)."""
        out = {}
        for name in _CARRIED:
            ring = getattr(self, name)
            if not len(ring):
                continue
            times = ring.tail(0, _CARRIED_ROWS)
            k = sum(1 for t in times if t > times[-1] - _CARRIED_S)
            cols = []
            for c, kind in enumerate(_carried_types(ring)):
                col = ring.tail(c, k)[::-_THIN][::-1]  # (every third, the newest kept)
                cols.append(col if kind == "Q" else [round(v, _DIGITS[kind]) for v in col])
            out[name] = cols
        return out

    def restore_blocks(self, saved) -> None:
        """Take up :meth:`saved_blocks`'s columns into rings that hold none yet (a rank just
        restored): a ring's columns that do not read (their count, lengths or types, a value not
        finite or negative, times not rising) leave that ring empty."""
        for name in _CARRIED:
            ring = getattr(self, name)
            cols = saved.get(name) if isinstance(saved, dict) else None
            if len(ring) or not isinstance(cols, list) or len(cols) != len(ring.types):
                continue
            try:
                rows = list(zip(*[[(int if t in "Qq" else float)(v) for v in col[-_BLOCKS:]]
                                  for col, t in zip(cols, ring.types)]))
            except (TypeError, ValueError):
                continue
            if (len({len(col) for col in cols}) != 1 or not all(math.isfinite(v) and v >= 0 for r in rows for v in r)
                    or any(b[0] <= a[0] for a, b in zip(rows, rows[1:]))):
                continue
            ring.extend(rows)

    # -- reading --------------------------------------------------------------------------------
    def backing(self, lo: float, edge: float, since: float, now: float, step_s: float,
                delta_s: float, loud: Callable[[], Sequence[tuple]] = tuple) -> tuple[Optional[Backing], tuple]:
        """The evidence of a shift of ``delta_s`` seconds per step on a step of ``step_s``:
        before is data time ``lo..edge``, after ``since..now``. Returns (the backing or None,
        the sources that could not be read: of PHASE_TIMES, LOADER_WAIT, ALLOCATOR_CALLS; empty
        when every source was compared). The backing's ``spreads`` is its growth in its source's
        own spreads (:meth:`spreads`), measured outside the (start, end) spans ``loud()``
        returns (the rank's episodes)."""
        if delta_s <= 0:
            return None, ()
        unknown = []
        found = self._phase_backing(lo, edge, since, now, delta_s)
        if found is None:
            unknown.append(PHASE_TIMES)
        best = found or None
        wait = self._wait_backing(lo, edge, since, now, delta_s)
        if wait is None:
            unknown.append(LOADER_WAIT)
        elif wait and (best is None or wait.share > best.share):
            best = wait
        if best is None:
            busy = self._busy_backing(lo, edge, since, now, step_s, delta_s)
            if busy:
                best = busy
        churn = self._churn(lo, edge, since, now, step_s)
        if churn is None:
            unknown.append(ALLOCATOR_CALLS)
        elif churn and (best is None or (best.kind == Kind.PHASE and best.name == "sync")):
            # (over the sync phase too: the host waiting on the device is what the churn's calls
            # do to the step; a live H200 job's empty_cache() read "a change of the job: sync +4.2
            # ms/step" beside its why's "allocator churn: cudaMalloc/cudaFree 0.0 -> 131.2 per
            # step", tests/data/real/diag/h200zzc)
            best = churn
        if best is not None:
            best = dataclasses.replace(best, spreads=self.spreads(best, edge, since, now, step_s, loud, lo))
        return best, tuple(unknown)

    def spreads(self, b: Backing, edge: float, since: float, now: float, step_s: float,
                loud: Callable[[], Sequence[tuple]] = tuple, lo: Optional[float] = None) -> Optional[float]:
        """``b``'s growth in spreads of its source's medians over as many blocks as its span after
        (``since..now``) holds, that source measured before ``edge`` outside ``loud()``
        (:class:`SourceNoise`); None for allocator calls (their rule is a count: 3x), for the
        GPU's busy time (one NVML sample a block, and the step time is half of it: a healthy
        2 x H200 job's stood 4.6 spreads out on its host's wave), for a phase its host paces
        (``host_paced``) unless it is a compute phase that grew ``_BEYOND_PACE`` times faster
        than the step (a 2 x H200 job's host wandered +10% for 40 s, all of it in its host-bound
        forward, +2.7 ms, which had stood within 1 ms for minutes: 14 of its spreads), or when
        the history is too short to tell. Given ``lo`` (the span before is ``lo..edge``), a
        compute phase's or the device work's growth that its host did not pace is also read as
        its device time beyond its host time where the launches paced it (:meth:`_beyond_host`),
        and the larger of the two readings is returned."""
        if b.unit != "ms" or b.kind == Kind.GPU:
            return None
        if b.host_paced and (b.name not in _COMPUTE or b.before <= 0
                             or b.share * step_s * 1e3 < _BEYOND_PACE * b.before):
            return None  # (grown by the step's pace or less: a slower host can do that)
        if b.kind in (Kind.PHASE, Kind.DEVICE, Kind.BEYOND):
            after = [r for r in self.phases if since <= r[0] <= now + _BLOCK_S]
            if not after:
                return None
            kind = after[-1][2]
            key, rows = self._source(b.kind, _columns(b), kind)
            n = sum(1 for r in after if r[2] == kind)
        else:
            key, rows = self._source(b.kind)
            n = sum(1 for r in self.waits if since <= r[0] <= now + _BLOCK_S)
        s = self.noise.spread(key, n, edge, step_s, rows, loud)
        out = None if s is None else round((b.after - b.before) / 1e3 / s, 1)
        if _beyond_read(b) and lo is not None:
            beyond = self._beyond_host(b, lo, edge, since, now, kind, n, step_s, loud)
            if beyond is not None and (out is None or beyond > out):
                out = beyond
        return out

    def _beyond_host(self, b: Backing, lo: float, edge: float, since: float, now: float, kind: int, n: int,
                     step_s: float, loud) -> Optional[float]:
        """The growth of ``b``'s device time beyond its host time (device minus host, of its
        phase columns) over ``since..now`` against ``lo..edge``, in spreads of that difference's
        own medians: on a launch-bound job the device keeps pace with the host's launches, so a
        phase's device time wanders with its host (a held-out H200 job's forward and backward
        8-9% between adjacent 10-s blocks) while the difference stays near nothing; work added on
        the device then stands out of it though not of the device time. Only where the launches
        paced it before (:meth:`_launched`): where the device ran ahead of them, the host time is
        the host's own work and waits, and the difference wanders with it (a GPU-bound 2 x H200
        job's backward host time 15-25 ms under a steady 23.6 ms of device time). None when the
        blocks cannot tell, the launches did not pace it, or the difference did not grow."""
        ks = _columns(b)
        key, rows = self._source(Kind.BEYOND, ks, kind)
        before = self._launched(ks, lo, edge, kind)
        after = [v for t, v in rows() if since <= t <= now + _BLOCK_S]
        if before is None or len(after) < _MIN_BLOCKS:
            return None
        grew = median(after) - before
        if grew <= 0:
            return None
        s = self.noise.spread(key, n, edge, step_s, rows, loud)
        return None if s is None else round(min(grew, (b.after - b.before) / 1e3) / s, 1)

    def _launched(self, ks: tuple, lo: float, edge: float, points: Optional[int] = None) -> Optional[float]:
        """The device time beyond the host time of the phase columns ``ks`` over ``lo..edge`` (s,
        the median of its blocks; of ``points`` blocks only, when given) where it stood under
        ``_LAUNCHED`` of their device time there: the launches paced them. None otherwise, or with
        fewer than ``_MIN_BLOCKS`` blocks."""
        rows = [r for r in self.phases if lo <= r[0] < edge and (points is None or r[2] == points)]
        if len(rows) < _MIN_BLOCKS:
            return None
        beyond = median([sum(r[3 + k] - r[8 + k] for k in ks) for r in rows])
        return beyond if beyond <= _LAUNCHED * median([sum(r[3 + k] for k in ks) for r in rows]) else None

    def wait_backing(self, lo: float, edge: float, since: float, now: float, step_s: float,
                     delta_s: float, loud: Callable[[], Sequence[tuple]] = tuple) -> Optional[Backing]:
        """The loader's wait alone as the evidence of a shift of ``delta_s`` per step (as
        :meth:`backing` reads it, but not set against the phases: the data phase, which holds
        the wait, is host-paced by it), with its spreads; None when it does not hold it or
        cannot be read."""
        b = self._wait_backing(lo, edge, since, now, delta_s)
        if not b:
            return None
        return dataclasses.replace(b, spreads=self.spreads(b, edge, since, now, step_s, loud))

    def wait_level(self, lo: float, edge: float) -> Optional[float]:
        """The loader's mean wait per step (seconds) over ``lo..edge``, the median of its blocks
        there; None with fewer than ``_MIN_BLOCKS`` of them kept."""
        before = [r[1] for r in self.waits if lo <= r[0] < edge]
        return median(before) if len(before) >= _MIN_BLOCKS else None

    def wait_since(self, level: float, since: float, now: float, step_s: float, delta_s: float,
                   loud: Callable[[], Sequence[tuple]] = tuple) -> Optional[Backing]:
        """:meth:`wait_backing` against a level read before (``level``, seconds: the wait while
        the rank settled, :meth:`wait_level`), its spreads measured up to ``since``. None when
        the wait does not hold ``delta_s``."""
        b = self._wait_over(level, since, now, delta_s) if delta_s > 0 else None
        if not b:
            return None
        return dataclasses.replace(b, spreads=self.spreads(b, since, since, now, step_s, loud))

    def beyond_levels(self, lo: float, edge: float) -> Optional[tuple[int, dict]]:
        """(points, {phase column: its device time beyond its host time, s}) of the compute
        phases the launches paced over ``lo..edge`` (:meth:`_launched`, in the blocks of the
        newest kind of points there): the levels :meth:`beyond_since` reads a slow change
        against. None when no compute phase was launch-paced there or the blocks cannot tell."""
        rows = [r for r in self.phases if lo <= r[0] < edge]
        if not rows:
            return None
        kind = rows[-1][2]
        levels = {}
        for k in (PHASES.index(p) for p in _COMPUTE):
            level = self._launched((k,), lo, edge, kind)
            if level is not None:
                levels[k] = level
        return (kind, levels) if levels else None

    def beyond_since(self, levels: tuple, since: float, now: float, step_s: float, delta_s: float,
                     loud: Callable[[], Sequence[tuple]] = tuple) -> Optional[Backing]:
        """The compute phase whose device time beyond its host time over ``since..now`` grew
        the most above its level in ``levels`` (:meth:`beyond_levels`, read while the rank
        settled), as the evidence of ``delta_s`` per step (at least ``_SHARE`` of it), with its
        spreads measured up to ``since``: a ramp of work added on the device of a launch-bound
        job, which no onset shows and whose device time wanders with the host's pace. None when
        none holds it or the blocks cannot tell (too few of the same kind of points)."""
        kind, per = levels
        rows = [r for r in self.phases if since <= r[0] <= now + _BLOCK_S and r[2] == kind]
        if delta_s <= 0 or len(rows) < _MIN_BLOCKS or sum(r[1] for r in rows) < _MIN_SAMPLES:
            return None
        grew = {k: median([r[3 + k] - r[8 + k] for r in rows]) - level for k, level in per.items()}
        k = max(grew, key=lambda j: grew[j])
        if grew[k] < _SHARE * delta_s:
            return None
        b = Backing(Kind.BEYOND, PHASES[k], per[k] * 1e3, (per[k] + grew[k]) * 1e3, "ms", grew[k] / delta_s)
        return dataclasses.replace(b, spreads=self.spreads(b, since, since, now, step_s, loud))

    def _source(self, kind: str, ks: tuple = (), points: int = 0) -> tuple:
        """(key, rows) of one source of the evidence as :class:`SourceNoise` measures it: a phase
        or the device's work (the columns ``ks`` of the blocks of ``points``), or the loader's wait."""
        if kind in (Kind.PHASE, Kind.DEVICE):
            return (kind, ks, points), lambda: [(r[0], sum(r[3 + k] for k in ks)) for r in self.phases
                                                if r[2] == points]
        if kind == Kind.BEYOND:
            return (kind, ks, points), lambda: [(r[0], sum(r[3 + k] - r[8 + k] for k in ks)) for r in self.phases
                                                if r[2] == points]
        return (kind,), lambda: [(r[0], r[1]) for r in self.waits]

    def measure_unread(self, loud: Callable[[], Sequence[tuple]] = tuple) -> bool:
        """At a save of the drift state: measure the spread of one source not measured over the
        last 30 minutes (a phase's device time, the device's work, the loader's wait), over runs
        of 6, 8, 10 and 12 blocks, so that a collector restart carries it (:meth:`SourceNoise.saved`):
        a change in a source first read in the 90 s after a restart is then decided by its
        evidence too, read in the spread of the longest run no longer than its span (6-block
        runs alone spread more: a 2 x H200 job's forward pulse after a restart stood 3.2-3.8 of
        them out on one rank and was raised after 127 s; 46 s with the longer runs). Only on a
        rank whose evidence was read before (its step time shifted: a wandering host); elsewhere
        nothing is measured. At most one source per save (about once a minute of data): ~0.1 ms
        a run length on real 2 x H200 and launch-bound recordings; what the rank decides now is
        not changed by it. True when one was measured."""
        if not self.noise.read() or not len(self.phases):
            return False
        points = self.phases[-1][2]
        edge = self.phases[-1][0] + _BLOCK_S
        sources = [self._source(Kind.PHASE, (j,), points) for j in range(len(PHASES))]
        sources.append(self._source(Kind.DEVICE, _DEVICE_COLUMNS, points))
        if len(self.waits):
            sources.append(self._source(Kind.LOADER))
        for key, rows in sources:
            if self.noise.due(key, edge):
                for n in (MIN_RUN, MIN_RUN + 2, MIN_RUN + 4, 2 * MIN_RUN):
                    self.noise.measure_for_restart(key, n, edge, rows, loud)
                return True
        return False

    def grown(self, b: Backing, lo: float, edge: float, since: float, now: float, step_s: float) -> Optional[float]:
        """How much the source of ``b`` stands above its level of ``lo..edge`` over
        ``since..now``, in ``b``'s unit (None when the blocks cannot tell). When this rank holds
        no block of ``lo..edge`` (a collector restarted since ``b`` was read there, or the span
        fell out of the kept 30 minutes), ``b.before``, read there then, is that level: a held-out
        2 x H200 job's loader pulse, the collector restarted 45 s into it, ended 118 and 308 s
        after the pulse instead of 68 s (the host stayed up, so the step alone held it open), and
        the next pulse was folded into it (tests/collector/detect/test_detect_persist.py). A
        compute phase's growth that its host did not pace, where the launches paced it before (its
        device time beyond its host time under ``_LAUNCHED`` of its device time over ``lo..edge``,
        :meth:`_launched`), is read as its device time beyond its host time (as :meth:`spreads`
        reads it): on a launch-bound job the device time rises and falls with the host's pace, so
        an episode of work added on the device ended when the host dipped while the work stayed
        (a held-out H200 job's +5% backward, ended 56 s in and raised again), and stayed open when
        the host rose after the work ended (h200y_1gpu_s's forward pulse: 214 s after its end,
        69 s with this). Not where the device ran ahead of the launches: a GPU-bound 2 x H200
        job's backward host time wanders 15-25 ms under a steady 23.6 ms of device time
        (tests/data/real/h200x_2gpu_m), and read so its +10% episode ended while it lasted. The
        device's work over every phase is read on its device time, or, where more, on the most
        any launch-paced compute phase's device time beyond its host time grew
        (:meth:`_beyond_grown`): a held-out H200 job's +5% backward began as its host rose, was
        read as the device's work (every phase grew with the host), and that episode ended as the
        host dipped 23 s in while backward's difference stayed grown. Not on the difference
        alone: a rank whose host waits for the device inside its phases (the second rank of a
        2 x H200 job, h200zb_2gpu_m) shows its work's device time within 0.5 ms of its host time
        as a launch-bound job does, and its +5% backward episode, read so, ended while it
        lasted."""
        if b.kind == Kind.BEYOND:  # (a slow change's: against its level while the rank settled)
            k = _columns(b)[0]
            rows = [r for r in self.phases if since <= r[0] <= now + _BLOCK_S]
            kind = rows[-1][2] if rows else None
            after = [r[3 + k] - r[8 + k] for r in rows if r[2] == kind]
            before = [r[3 + k] - r[8 + k] for r in self.phases if lo <= r[0] < edge and r[2] == kind]
            if len(after) < 2:
                return None
            return (median(after) - (median(before) if len(before) >= _MIN_BLOCKS else b.before / 1e3)) * 1e3
        if b.kind in (Kind.PHASE, Kind.DEVICE):
            ks = _columns(b)
            rows = [r for r in self.phases if since <= r[0] <= now + _BLOCK_S]
            level = (self._launched(ks, lo, edge, rows[-1][2]) if b.kind == Kind.PHASE and _beyond_read(b) and rows
                     else None)
            if level is not None:  # (work added on the device of a phase the launches paced before)
                after = [sum(r[3 + k] - r[8 + k] for k in ks) for r in rows if r[2] == rows[-1][2]]
                if len(after) >= 2:
                    return (median(after) - level) * 1e3
            before = [sum(r[3 + k] for k in ks) for r in self.phases if lo <= r[0] < edge]
            after = [sum(r[3 + k] for k in ks) for r in rows]
            if b.kind == Kind.DEVICE and rows and len(after) >= 2:
                beyond = self._beyond_grown(lo, edge, rows)
                if beyond is not None:
                    return max(beyond, median(after) * 1e3 - (median(before) * 1e3 if before else b.before))
            scale = 1e3
        elif b.kind == Kind.LOADER:
            before = [r[1] for r in self.waits if lo <= r[0] < edge]
            after = [r[1] for r in self.waits if since <= r[0] <= now + _BLOCK_S]
            scale = 1e3
        elif b.kind == Kind.GPU:
            return None  # (a share of the step: what it is now needs the step now; the step decides)
        else:
            rows = list(self.alloc)
            y = _rate([r for r in rows if since <= r[0] <= now + _BLOCK_S])
            x = _rate([r for r in rows if lo <= r[0] < edge])
            return None if y is None else y * step_s - (b.before if x is None else x * step_s)
        if len(after) < 2:
            return None
        return median(after) * scale - (median(before) * scale if before else b.before)

    def _beyond_grown(self, lo: float, edge: float, rows: list) -> Optional[float]:
        """The most any compute phase the launches paced over ``lo..edge`` grew its device time
        beyond its host time in ``rows`` (the blocks after, ms), against its level there; None
        when none was launch-paced there."""
        kind = rows[-1][2]
        grew = []
        for k in (PHASES.index(p) for p in _COMPUTE):
            level = self._launched((k,), lo, edge, kind)
            after = [r[3 + k] - r[8 + k] for r in rows if r[2] == kind]
            if level is not None and len(after) >= 2:
                grew.append((median(after) - level) * 1e3)
        return max(grew) if grew else None

    def change_at(self, b: Backing, lo: float, after: float, now: float) -> Optional[float]:
        """Where the source of ``b`` (a phase's or the device work's time, the loader wait, the
        allocator's calls per second) changed, as a data time: the start of the first block after
        the split of its blocks ``lo..now`` that best separates a lower level before from a
        higher one after (the largest mean difference x sqrt(n1 n2 / n), at least
        ``_MIN_BLOCKS`` blocks a side), the split at or after ``after``; None for other sources
        or too few blocks. A step-time onset on a host that wandered up before the job's change
        is dated at the wander; the source that holds the change dates the change itself (a
        launch-bound H200 job's host rose +12% 74 s before its ``empty_cache()`` each step
        began: the allocator's calls, 0 -> 2 per step, date that, tests/data/real/diag/h200zp)."""
        if b.kind in (Kind.PHASE, Kind.DEVICE):
            ks = _columns(b)
            rows = [r for r in self.phases if lo <= r[0] <= now + _BLOCK_S]
            kind = rows[-1][2] if rows else None
            series = [(r[0], sum(r[3 + k] for k in ks)) for r in rows if r[2] == kind]
        elif b.kind == Kind.LOADER:
            series = [(r[0], r[1]) for r in self.waits if lo <= r[0] <= now + _BLOCK_S]
        elif b.kind == Kind.ALLOCATOR:  # (calls per second between two samples, a block apart or more)
            rows = [r for r in self.alloc if lo - _BLOCK_S <= r[0] <= now + _BLOCK_S]
            series = [(y[0], (y[1] - x[1]) / (y[0] - x[0])) for x, y in zip(rows, rows[1:])
                      if y[0] > x[0] and y[1] >= x[1] and y[0] >= lo]
        else:
            return None
        n = len(series)
        if n < 2 * _MIN_BLOCKS:
            return None
        values = [v for _, v in series]
        total, best, at = sum(values), None, None
        head = sum(values[:_MIN_BLOCKS - 1])
        for i in range(_MIN_BLOCKS, n - _MIN_BLOCKS + 1):
            head += values[i - 1]
            if series[i][0] - _BLOCK_S < after:
                continue
            d = (total - head) / (n - i) - head / i
            score = d * (i * (n - i) / n) ** 0.5
            if d > 0 and (best is None or score > best):
                best, at = score, series[i][0] - _BLOCK_S
        return at

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
        hb = [median([r[8 + k] for r in before]) for k in range(5)]  # (the phases' host times)
        ha = [median([r[8 + k] for r in after]) for k in range(5)]
        # phases not seen apart hold 0 and their time in the next seen: compared as they come
        grew = [y - x for x, y in zip(b, a)]
        k = max(range(5), key=lambda j: grew[j])
        d = grew[k]
        if d >= _SHARE * delta_s and b[k] > 0:
            rest_b = sum(b) - b[k]
            rest = sum(grew) - d
            if rest_b <= 0 or rest <= 0 or d / b[k] >= _CONCENTRATED * rest / rest_b:
                paced = ha[k] - hb[k] >= _HOST_GREW * d
                if not paced or _concentrated(k, hb, ha):
                    return Backing(Kind.PHASE, PHASES[k], b[k] * 1e3, a[k] * 1e3, "ms", d / delta_s, host_paced=paced)
        # the device's own work (every phase but sync, the wait) grew by half the step's growth
        # with the host's time in those phases not grown with it: more work on the GPU (real
        # GEMMs added to an H200 job's backward: backward +2.2, forward +1.0..2.2, optimizer
        # +1.6 ms device time, the host's no longer), never a host that launches more slowly. The
        # host's time is read in the compute phases: data's is mostly the wait for the loader, and
        # a wait that fell must not hide a host that slowed (a healthy 2 x H200 job's wander: data's
        # host time 10.7 -> 4.3 ms while forward's and backward's grew +2.8 ms each, their device
        # time +1.9 and +1.6 ms: tests/data/real/h200t_2gpu_m_sched_short)
        own = _DEVICE_COLUMNS
        work = sum(grew[j] for j in own)
        host = sum(ha[j] - hb[j] for j in range(5) if PHASES[j] in _COMPUTE)
        if work >= _SHARE * delta_s and host < _HOST_GREW * work:
            return Backing(Kind.DEVICE, "device work", sum(b[j] for j in own) * 1e3, sum(a[j] for j in own) * 1e3,
                           "ms", work / delta_s)
        return False

    def _busy_backing(self, lo, edge, since, now, step_s, delta_s):
        """The GPU's busy time per step (GPM SM activity x step time) grew by half the step's
        growth: the device does more work per step, or the same work more slowly (its clock);
        a host that launches more slowly leaves it as it was (more idle time, the same busy).
        A real H200 job with GEMMs added to its backward: SM activity 0.73 -> 0.72 of a step
        44.0 -> 48.4 ms, busy +2.5 ms of the +4.4 ms."""
        before = [r[1] for r in self.busy if lo <= r[0] < edge]
        after = [r[1] for r in self.busy if since <= r[0] <= now + _BLOCK_S]
        if len(before) < _MIN_BLOCKS or len(after) < _MIN_BLOCKS:
            return None
        b, a = median(before) * step_s, median(after) * (step_s + delta_s)
        if a - b < _SHARE * delta_s:
            return False
        return Backing(Kind.GPU, "GPU busy time", b * 1e3, a * 1e3, "ms", (a - b) / delta_s)

    def _wait_backing(self, lo, edge, since, now, delta_s):
        level = self.wait_level(lo, edge)
        return None if level is None else self._wait_over(level, since, now, delta_s)

    def _wait_over(self, b, since, now, delta_s):
        """The wait over ``since..now`` against its level ``b`` (seconds) as the evidence of
        ``delta_s`` per step: a Backing, False when it does not hold it, None with too few blocks."""
        after = [r[1] for r in self.waits if since <= r[0] <= now + _BLOCK_S]
        if len(after) < _MIN_BLOCKS:
            return None
        a = median(after)
        if a - b < (_WAIT_SHARE if a >= _WAIT_TIMES * b else _SHARE) * delta_s:
            return False
        return Backing(Kind.LOADER, "data-loader wait", b * 1e3, a * 1e3, "ms", (a - b) / delta_s)

    def _churn(self, lo, edge, since, now, step_s):
        rows = list(self.alloc)
        before = _rate([r for r in rows if lo <= r[0] < edge])
        after = _rate([r for r in rows if since <= r[0] <= now + _BLOCK_S])
        if before is None or after is None:
            return None
        b, a = before * step_s, after * step_s  # calls per step
        if a - b < _CHURN_MORE or a < _CHURN_TIMES * b:
            return False
        return Backing(Kind.ALLOCATOR, "allocator calls", b, a, "calls/step", 1.0)


def _concentrated(k: int, before: list, after: list) -> bool:
    """Phase ``k``'s host time grew by at least ``_CONCENTRATED`` x the share by which any other
    phase's host time grew (of forward, backward and optimizer: data's is mostly the wait for
    the loader, sync's the wait for the device). A phase its host paces is held by its own
    host time, against each other phase: a launch-bound H200 job whose host slowed grew its
    backward's host time +21%, forward's +9%, optimizer's +7% (data's, 3 ms of loader wait, not
    at all), and its optimizer's device time, most of it the GPU finishing backward's queue,
    diluted the others' device-time share enough to make that backward look concentrated
    (tests/data/real/h200u_1gpu_xs); the for-loop optimizer grows its own host time alone."""
    if before[k] <= 0:
        return False
    grew = (after[k] - before[k]) / before[k]
    others = [(after[j] - before[j]) / before[j] for j in range(5)
              if j != k and PHASES[j] in ("forward", "backward", "optimizer") and before[j] > 0]
    return not others or grew >= _CONCENTRATED * max(0.0, *others)


def _beyond_read(b: Backing) -> bool:
    """Whether ``b`` is also read as its device time beyond its host time: work added on the
    device, in a compute phase (forward, backward, the optimizer) or the device's work, its host
    time not grown with it. Not data's or sync's: their time is a wait (for the loader, for the
    device), the device's and the host's alike."""
    return (b.kind == Kind.DEVICE or (b.kind == Kind.PHASE and b.name in _COMPUTE)) and not b.host_paced


def _columns(b: Backing) -> tuple:
    """The phase columns a phase's, a phase's beyond-host or the device work's backing reads:
    its phase's, or every phase's but sync's."""
    return (PHASES.index(b.name),) if b.kind in (Kind.PHASE, Kind.BEYOND) else _DEVICE_COLUMNS


def _rate(rows: list) -> Optional[float]:
    """Calls per second over cumulative samples ``rows`` (None under two, or a counter reset)."""
    if len(rows) < 2 or rows[-1][0] <= rows[0][0] or rows[-1][1] < rows[0][1]:
        return None
    return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])
