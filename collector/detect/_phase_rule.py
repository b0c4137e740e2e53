"""The straggler rule's phase-time evidence: each rank's sampled phase times pooled per block,
the verdict of a block (the rank slower in its own work while the others wait for it, in sync
or inside their backward) and the runs of such verdicts that must last or cost the job before a
block counts. :class:`~._straggler.StragglerDetector` owns one and asks it per judged block;
the rules themselves are told in that module's docstring. Not thread-safe.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Optional

from ._config import StragglerConfig
from ._types import median

__all__ = ["PhaseRule", "WAIT_IN_BACKWARD", "BEFORE_COLLECTIVES"]

WAIT_IN_BACKWARD = "longer in backward and sync"  # in a phase condition's summary
BEFORE_COLLECTIVES = "before the collectives"  # in every phase condition's summary, either wait

_MAX_PHASE_SAMPLES = 512  # a rank's phase samples kept (its last _PHASE_REACH x window_blocks blocks at most)
_MIN_PHASE_SAMPLES = 5    # a pool of fewer is not judged
_PHASE_REACH = 8          # a sparse pool reaches back this many times window_blocks blocks at most
_LEVEL_REACH = 8          # the job's step-time level before reaches back this many times window_blocks blocks


@dataclasses.dataclass
class _PhaseRun:
    """A rank's last ``window_blocks`` phase verdicts before the cost gate, and the run of slow
    ones they are in."""
    flags: collections.deque     # (slow, step) per block
    slow: int = 0                # how many of ``flags`` are slow
    since: Optional[float] = None  # data time since when at least half of min_blocks were
    level: Optional[float] = None  # the job's step level when the run began
    excess: float = 0.0          # the rank's excess in the first block of the run judged for its cost
    counted: bool = False        # the run has counted by its cost


class PhaseRule:
    """Phase samples, the job's step level per block, and each rank's runs of phase verdicts."""

    def __init__(self, cfg: StragglerConfig):
        self.cfg = cfg
        self._pools: dict[int, collections.deque] = {}  # rank -> (block, pre, own, sync) samples
        # (block, median step time of its ranks) of the last _LEVEL_REACH x window_blocks blocks
        self._levels: collections.deque = collections.deque()
        self._lag: dict[int, _PhaseRun] = {}  # rank -> its "sync" phase verdicts before the cost gate
        self._lag_any: dict[int, _PhaseRun] = {}  # rank -> its phase verdicts of either kind, the same

    def add(self, rank: int, steps: list, pres: list, owns: list, syncs: list) -> None:
        """Sampled phase times of ``rank``, per step in seconds: its time before the collectives
        (data + forward + optimizer), its own time (all but sync) and its sync time."""
        size = self.cfg.block_steps
        pool = self._pools.get(rank)
        if pool is None:
            pool = self._pools[rank] = collections.deque(maxlen=_MAX_PHASE_SAMPLES)
        pool.extend(zip([s // size for s in steps], pres, owns, syncs))

    def forget(self, rank: int) -> None:
        self._pools.pop(rank, None)
        self._lag.pop(rank, None)
        self._lag_any.pop(rank, None)

    @property
    def has_level(self) -> bool:
        return bool(self._levels)

    def pooled(self, rank: int, bid: int) -> Optional[tuple]:
        """Medians of (pre, own, sync) over the rank's phase samples of its last
        ``window_blocks`` blocks up to ``bid`` (one sample per block at a small phase budget: a
        block alone is too few); when those are fewer than _MIN_PHASE_SAMPLES, over its newest
        _MIN_PHASE_SAMPLES up to ``bid`` within _PHASE_REACH times as many blocks (a short-step
        job samples one step in tens); None with fewer still."""
        pool = self._pools.get(rank)
        if not pool:
            return None
        lo = bid - _PHASE_REACH * self.cfg.window_blocks
        while pool and pool[0][0] <= lo:
            pool.popleft()
        rows = [row for row in pool if row[0] <= bid]
        recent = bid - self.cfg.window_blocks
        window = [row for row in rows if row[0] > recent]
        rows = window if len(window) >= _MIN_PHASE_SAMPLES else rows[-_MIN_PHASE_SAMPLES:]
        if len(rows) < _MIN_PHASE_SAMPLES:
            return None
        return tuple(median([row[k] for row in rows]) for k in (1, 2, 3))

    def judge(self, rank: int, own: tuple, others: tuple, mt: float, floor: float, step: int, time: float,
              held: bool) -> tuple:
        """One block of ``rank`` judged by its phase times (``own``: its pooled (pre, own, sync),
        ``others``: the other ranks' medians of the same; ``mt`` their step, ``floor`` the spread):
        (verdict, first, runs). ``verdict`` (see :meth:`_by_own_work`) when the block counts as
        slow, else None; ``first``: True when this block is the first of its run to count by its
        cost (the run's earlier slow blocks count too: :meth:`count_run` with
        ``runs[rank]``). ``held``: the rank is flagged already (its slow blocks count as they
        come)."""
        by_phase, first, runs = self._by_own_work(own, others, mt, floor), False, self._lag
        in_sync = by_phase is not None and by_phase[5] == "sync"
        since = self._lagging(self._lag, rank, in_sync, step, time)
        if by_phase is None and rank in self._lag_any and self._lag_any[rank].since is not None:
            # a run of either kind goes on at a quarter of the ratio's excess and half the z
            by_phase = self._by_own_work(own, others, mt, floor / 2, 1 + (self.cfg.phase_ratio - 1) / 4)
            in_sync = False  # (counted by the run of both kinds only)
        since_any = self._lagging(self._lag_any, rank, by_phase is not None, step, time)
        if by_phase is not None and not held:
            first = self._costly(self._lag[rank], since, time, by_phase[0]) if in_sync else None
            if first is None:  # the others waiting in their backward, or a run of both kinds
                runs, first = self._lag_any, self._costly(self._lag_any[rank], since_any, time,
                                                          by_phase[0], in_sync=False)
            if first is None:
                by_phase = None  # it has neither made the job slower for a while nor lasted
        return by_phase, bool(first), runs

    def _lagging(self, runs: dict, rank: int, slow: bool, step: int, time: float) -> Optional[float]:
        """Record a block's phase verdict for ``rank`` in ``runs``; the data time since when at
        least half of ``min_blocks`` of its last ``window_blocks`` verdicts there have been
        slow, or None."""
        run = runs.get(rank)
        if run is None:
            run = runs[rank] = _PhaseRun(collections.deque(maxlen=self.cfg.window_blocks))
        flags = run.flags
        run.slow += slow - (len(flags) == flags.maxlen and flags[0][0])
        flags.append((slow, step))
        if run.slow * 2 >= self.cfg.min_blocks:
            run.since = run.since if run.since is not None else time
        else:  # the run ended: its level before goes with it
            run.since, run.level, run.counted = None, None, False
        return run.since

    @staticmethod
    def count_run(run: _PhaseRun, hist: collections.deque) -> int:
        """Once a rank's phase ``run`` first counts, its earlier slow verdicts still in ``hist``
        count too (they were held back only until the run proved costly); the new slow count."""
        slow_steps = {step for slow, step in run.flags if slow}
        for i, (flag, step, time) in enumerate(hist):
            if not flag and step in slow_steps:
                hist[i] = (True, step, time)
        return sum(flag for flag, _, _ in hist)

    def _costly(self, run: _PhaseRun, since: Optional[float], time: float, excess: float,
                in_sync: bool = True) -> Optional[bool]:
        """Whether a rank slow by its phases in this block counts, by its ``run`` of slow
        verdicts. ``in_sync`` (the others waiting in sync): the run has lasted
        ``phase_persist_s``, or ``phase_cost_s`` while the job's step time (the median of the
        last ``window_blocks`` blocks) exceeds its level when the run began by
        ``phase_cost_share`` x ``excess``; else (the others waiting in their backward, where
        equal step periods make a wait whoever is slower): both, the cost after
        ``phase_persist_s``. None: not counted; True: counted by its cost, the first block of
        its run that is (the run's earlier slow blocks then count too); False: counted (by its
        length, the blocks from then on only)."""
        cfg = self.cfg
        lasted = time - since if since is not None else -1.0
        if since is not None and run.level is None:
            run.level, run.excess = self._level_before(), excess
        if in_sync and lasted >= cfg.phase_persist_s:
            return False
        if lasted < (cfg.phase_cost_s if in_sync else cfg.phase_persist_s) or run.level is None or \
                self.level_now() - run.level < cfg.phase_cost_share * (excess if in_sync else max(excess, run.excess)):
            return None
        first, run.counted = not run.counted, True
        return first

    def keep_level(self, vals: dict, times: list) -> None:
        """Keep this block's median step time (the last _LEVEL_REACH x window_blocks blocks)."""
        bid = next(iter(vals.values()))[2] // self.cfg.block_steps
        levels = self._levels
        levels.append((bid, median(times)))
        while levels[0][0] <= bid - _LEVEL_REACH * self.cfg.window_blocks:
            levels.popleft()

    def level_now(self) -> float:
        """The median step time of the last ``window_blocks`` blocks kept."""
        bid = self._levels[-1][0]
        return median([t for b, t in self._levels if b > bid - self.cfg.window_blocks])

    def _level_before(self) -> Optional[float]:
        """The median step time of the blocks kept before the last ``window_blocks`` (None
        with fewer than 3): the job's level before a run of slow blocks that began within them.
        Computed only for a rank slow by its phases: most blocks have none."""
        bid = self._levels[-1][0]
        before = [t for b, t in self._levels if b <= bid - self.cfg.window_blocks]
        return median(before) if len(before) >= 3 else None

    def _by_own_work(self, own: tuple, others: tuple, mt: float, floor: float,
                     ratio: Optional[float] = None) -> Optional[tuple]:
        """A rank's block judged by its phase times: ``own`` its (before the collectives, all
        but sync, sync) per step, ``others`` the other ranks' medians of the same; ``mt`` their
        step, ``floor`` the spread. (own excess, pre, others' pre, wait, others' wait, where) when
        slow, else None; ``where`` is "sync" or "backward". Before the collectives the others
        cannot be waiting for anyone: an excess there is this rank's own; over the whole step,
        part of the others' wait can land in their backward (measured on two H100s: 4.8 of a
        6.5 ms wait). "sync": the others wait in sync at least ``phase_wait_share`` x the excess
        longer. "backward": the excess is before the collectives and the others' wait is all in
        their backward, DDP's gradient all-reduce waiting for this rank's buckets (two H200s, a
        busy host on rank 1: its forward +4.5 ms, rank 0's backward +4.3 ms, sync +0.1 ms); equal
        step periods make that wait as large as the excess whoever is slower, so such a block
        counts only once its run has lasted ``phase_persist_s`` (see :meth:`_costly`)."""
        (pre, mine, sync), (m_pre, m_own, m_sync) = own, others
        excess = max(pre - m_pre, mine - m_own)
        cfg = self.cfg
        if 1 + excess / mt < (ratio or cfg.phase_ratio) or excess / floor < cfg.robust_z:
            return None
        if m_sync - sync >= cfg.phase_wait_share * excess:
            return excess, pre, m_pre, sync, m_sync, "sync"
        late, m_late = mine - pre + sync, m_own - m_pre + m_sync  # backward and sync
        if pre - m_pre >= excess and m_late - late >= cfg.phase_wait_share * excess:
            return excess, pre, m_pre, late, m_late, "backward"
        return None
