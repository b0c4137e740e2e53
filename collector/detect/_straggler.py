"""Straggler rank among the ranks of one job, judged on aligned blocks of steps.

In synchronous data-parallel training every rank's step *period* is the same: the fast ranks
wait inside the collectives for the slow one. What differs is where the time goes, so a rank's
own excess is the larger of (its step time - the others' median) and (its data-loader wait -
the others' median). ``ratio = 1 + excess / others' median step time``; the robust z divides
the excess by max(1.4826*MAD of the others' step times, ``jitter_floor_ratio`` x median). A
block is slow when ratio >= ``ratio`` and z >= ``robust_z``; the rank is flagged when at least
``min_blocks`` of its last ``window_blocks`` blocks were slow, and cleared below half that.
A block is judged once every rank seen has finished it, or when some rank is two blocks
ahead. Compute slowness hidden inside collectives (slow GPU kernels) needs the profiler
window summaries and is not visible here. Not thread-safe.
"""

from __future__ import annotations

import collections
from typing import Optional

from ._config import StragglerConfig
from ._types import WARNING, Condition, finite_positive, median

__all__ = ["StragglerDetector"]

_MAX_OPEN_BLOCKS = 8


class StragglerDetector:
    """``feed`` returns True when ``conditions`` ({rank: Condition}) changed."""

    def __init__(self, cfg: StragglerConfig, job: str):
        self.cfg, self.job = cfg, job
        self._cur: dict[int, tuple[int, list, list, int, float]] = {}
        self._blocks: "collections.OrderedDict[int, dict]" = collections.OrderedDict()
        self._ranks: set[int] = set()
        self._hist: dict[int, collections.deque] = {}
        self._max_block = -1
        self.conditions: dict[int, Condition] = {}

    def feed(self, rank: int, step: int, time: float, step_time: float, wait: float) -> bool:
        if not finite_positive(step_time):
            return False
        self._ranks.add(rank)
        bid = step // self.cfg.block_steps
        cur = self._cur.get(rank)
        if cur is not None and cur[0] != bid:
            self._close(rank, cur)
            cur = None
        if cur is None:
            cur = self._cur[rank] = (bid, [], [], step, time)
        cur[1].append(step_time)
        cur[2].append(max(0.0, wait) if wait == wait else 0.0)
        if len(cur[1]) >= self.cfg.block_steps:
            self._close(rank, cur)
            del self._cur[rank]
        return self._judge_ready()

    def forget(self, rank: int) -> bool:
        self._ranks.discard(rank)
        self._cur.pop(rank, None)
        self._hist.pop(rank, None)
        return self.conditions.pop(rank, None) is not None

    def _close(self, rank: int, cur) -> None:
        bid, times, waits, step, time = cur
        if len(times) * 2 < self.cfg.block_steps:
            return  # a partial block (first block, restart): not comparable
        self._blocks.setdefault(bid, {})[rank] = (median(times), median(waits), step, time)
        self._max_block = max(self._max_block, bid)

    def _judge_ready(self) -> bool:
        changed = False
        while self._blocks:
            bid, vals = next(iter(self._blocks.items()))
            complete = len(vals) >= len(self._ranks)
            if not (complete or bid <= self._max_block - 2 or len(self._blocks) > _MAX_OPEN_BLOCKS):
                break
            del self._blocks[bid]
            if len(vals) >= 2:
                changed |= self._judge(vals)
        return changed

    def _judge(self, vals: dict) -> bool:
        cfg, changed = self.cfg, False
        for rank, (t, w, step, time) in vals.items():
            others = [v for r, v in vals.items() if r != rank]
            mt, mw = median(o[0] for o in others), median(o[1] for o in others)
            spread = 1.4826 * median(abs(o[0] - mt) for o in others) if len(others) >= 3 else 0.0
            excess = max(t - mt, w - mw)
            ratio, z = 1 + excess / mt, excess / max(spread, cfg.jitter_floor_ratio * mt)
            hist = self._hist.setdefault(rank, collections.deque(maxlen=cfg.window_blocks))
            hist.append((ratio >= cfg.ratio and z >= cfg.robust_z, step, time))
            changed |= self._update(rank, hist, ratio, t, mt, w, mw)
        return changed

    def _update(self, rank, hist, ratio, t, mt, w, mw) -> bool:
        cfg, old = self.cfg, self.conditions.get(rank)
        slow = sum(1 for s, _, _ in hist if s)
        if (old is None and slow < cfg.min_blocks) or (old is not None and slow * 2 < cfg.min_blocks):
            return self.conditions.pop(rank, None) is not None
        first: Optional[tuple] = next(((st, tm) for s, st, tm in hist if s), None)
        step, since = (old.step, old.since) if old is not None else first
        summary = (f"rank {rank} is a straggler: {ratio:.2f}x the other ranks' step time "
                   f"(own step {t * 1e3:.1f} ms vs {mt * 1e3:.1f} ms, data-loader wait {w * 1e3:.1f} ms "
                   f"vs {mw * 1e3:.1f} ms) in {slow} of the last {len(hist)} blocks since step {step:,}")
        cond = Condition("StepwatchStragglerRank", self.job, rank, WARNING, summary, since, step, cfg.for_s)
        self.conditions[rank] = cond
        return old is None or old.severity != cond.severity
