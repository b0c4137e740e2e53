"""Straggler rank among the ranks of one job, judged on aligned blocks of steps.

In synchronous data-parallel training every rank's step *period* is the same: the fast ranks
wait inside the collectives for the slow one. What differs is where the time goes, so a rank's
own excess is the larger of (its step time - the others' median) and (its data-loader wait -
the others' median). ``ratio = 1 + excess / others' median step time``; the robust z divides
the excess by max(1.4826*MAD of the others' step times, ``jitter_floor_ratio`` x median). A
block is slow when ratio >= ``ratio`` and z >= ``robust_z``; the rank is flagged when at least
``min_blocks`` of its last ``window_blocks`` blocks were slow, and cleared below half that.
A block is judged once every rank seen has finished it, or when some rank is further ahead
than two of the ranks' batches span (plus two blocks): the agents send their steps in batches
(one a second by default), so the same steps of different ranks arrive up to a batch apart (a
4-GPU NCCL job of ~15 ms steps: 65 steps a batch, the ranks' batches staggered). A rank that
stops sending holds the others' blocks that long at most.

The agents' always-on phase times say where each sampled step went. A rank slower in its own
work (more GEMMs, a slower data loader, a busy host) makes the others wait in the collectives:
their ``sync`` (from the last gradient to the optimizer step, where DDP waits for the gradient
all-reduce) grows, and part of the wait can land in their backward. A rank's excess is the
larger of its time before the collectives (data + forward + optimizer) and its own time (the
step but sync) over the other ranks' medians, all pooled over its samples of the last
``window_blocks`` blocks (at least 5: a small phase budget samples about one step in ten).
Where every rank of a block has such a pool, the block is also slow for a rank when
``1 + excess / the others' median step`` >= ``phase_ratio``, its z (as above) >= ``robust_z``,
and the others' median sync exceeds its own by at least ``phase_wait_share`` x the excess. Such a
block counts only once the rank's run of such blocks has lasted ``phase_cost_s`` while the job's
step time (the median of its last ``window_blocks`` blocks) stands ``phase_cost_share`` x the
excess above its level when the run began (the blocks before the last ``window_blocks`` then, up
to eight times as far back); the run's earlier slow blocks then count too (a busy host's blip of
a few seconds slows the job as well): in a
launch-bound job the ranks' device-clock phases differ by more than their hosts do (the rank
that waited runs its queued kernels back to back), and which rank looks slower flips with no
cost to the job, for seconds at a time. A rank slow in this way from the job's start is left to the step, wait and
window evidence until it has shown the excess for ``phase_persist_s``. In a host-bound job the
others wait for the slow rank inside their backward instead (DDP's all-reduce of its gradient
buckets; their sync unchanged): a block whose excess is before the collectives while the others'
backward and sync exceed the rank's by ``phase_wait_share`` x the excess is slow of that kind. Equal
step periods give the others such a wait whoever looks slower, so these blocks feed a second run
per rank (of both kinds), which counts only once it has lasted ``phase_persist_s`` while the job's
step time stands ``phase_cost_share`` x the run's first excess above its level before the run;
once begun, that run goes on through blocks at a quarter of ``phase_ratio``'s excess and half the
z (another rank's host blip narrows the gap for seconds).

A rank whose GPU is slow hides inside the collectives; the profiler windows show it
(:mod:`._straggler_windows`). One ``StepwatchStragglerRank`` condition per rank carries whichever evidence holds (both
joined when both do). Not thread-safe.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Optional

from ._activity import ActivitySkew
from ._config import StragglerConfig
from ._phase_rule import BEFORE_COLLECTIVES, WAIT_IN_BACKWARD, PhaseRule
from ._straggler_windows import WINDOWS, WindowSkew

# What a straggler condition found (Condition.found): the why reasons on these, never on prose.
OWN_WORK, GPU_BUSIER, STEPS = "own_work", "gpu_busier", "steps"
from ._names import STRAGGLER_RANK
from ._types import WARNING, Condition, WindowPoint, finite_positive, mads_without_each, median, medians_without_each

__all__ = ["StragglerDetector", "OWN_WORK", "GPU_BUSIER", "STEPS", "WINDOWS"]

_MAX_OPEN_BLOCKS = 64     # blocks waiting for their ranks; past this the oldest is judged as it is
_MAX_SPAN = (_MAX_OPEN_BLOCKS - 2) // 2  # a batch span past this waits no longer


class StragglerDetector:
    """``feed`` returns True when ``conditions`` ({rank: Condition}) changed."""

    def __init__(self, cfg: StragglerConfig, job: str):
        self.cfg, self.job = cfg, job
        self._cur: dict[int, tuple[int, list, list, int, float]] = {}
        self._blocks: "collections.OrderedDict[int, dict]" = collections.OrderedDict()
        self._ranks: set[int] = set()
        self._hist: dict[int, collections.deque] = {}
        self._slow: dict[int, int] = {}  # rank -> slow blocks in its _hist
        self._max_block = -1
        # rank -> (blocks in its previous run of closes, in its current one): a run is the
        # blocks a rank closes with no other rank's close between, i.e. one batch of its steps
        # (the same whether the batch is fed whole or step by step)
        self._span: dict[int, tuple[int, int]] = {}
        self._closer = -1  # the rank that closed the last block
        # how many ranks have each batch span (max of the two above, capped): the largest is
        # kept without a pass over every rank at each close
        self._spans = [0] * (_MAX_SPAN + 1)
        self._wait_blocks = 4  # blocks a block waits for its missing ranks (_lag_blocks)
        self._by_steps: dict[int, Condition] = {}
        self._windows = WindowSkew(cfg, job)  # the profiler windows' evidence
        self._by_phases: set[int] = set()  # ranks whose step-block condition the phase times raised
        self.conditions: dict[int, Condition] = {}
        self._phases = PhaseRule(cfg)  # phase samples, the job's level per block, runs of verdicts
        self._activity = ActivitySkew(cfg.activity_bucket_s, cfg.activity_warmup_s, cfg.activity_reference_buckets,
                                      cfg.activity_buckets, cfg.activity_rise, cfg.activity_floor)

    def feed(self, rank: int, step: int, time: float, step_time: float, wait: float) -> bool:
        if not finite_positive(step_time):
            return False
        self._ranks.add(rank)
        self._activity.step(rank, time, step)
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

    def feed_many(self, rank: int, step: list, end_time_s: list, duration_s: list, dataloader_wait_s: list) -> bool:
        """:meth:`feed` for each (a batch of ``rank``'s steps, as columns). Ready blocks are
        judged after each block this closes, as step by step (nothing else changes between)."""
        size, cur, changed = self.cfg.block_steps, self._cur.get(rank), False
        n = len(step)
        if n and step[-1] - step[0] == n - 1 and 0 < min(duration_s) and math.isfinite(sum(duration_s)) \
                and math.isfinite(sum(dataloader_wait_s)) and step == list(range(step[0], step[0] + n)):
            # The usual batch (consecutive steps, all usable): a block's run of steps at a time.
            spans, i = [], 0
            while i < n:
                spans.append((i, min(n, i + size - step[i] % size)))
                i = spans[-1][1]
        else:  # a step at a time, the unusable ones left out
            spans = [(i, i + 1) for i, t in enumerate(duration_s) if 0 < t < math.inf]
        if spans:
            self._ranks.add(rank)
            last = spans[-1][1] - 1
            self._activity.step(rank, end_time_s[last], step[last])
        for i, end in spans:  # every step of a span in one block
            while i < end:
                bid = step[i] // size
                if cur is not None and cur[0] != bid:
                    self._close(rank, cur)
                    cur = None
                    changed |= self._judge_ready()
                if cur is None:
                    cur = (bid, [], [], step[i], end_time_s[i])
                j = min(end, i + size - len(cur[1]))  # (a restarted rank may refill an open block)
                part = dataloader_wait_s[i:j]
                cur[1].extend(duration_s[i:j])
                cur[2].extend(part if min(part) > 0.0 else [w if w > 0.0 else 0.0 for w in part])
                i = j
                if len(cur[1]) >= size:
                    self._close(rank, cur)
                    cur = None
                    changed |= self._judge_ready()
        if cur is None:
            self._cur.pop(rank, None)
        else:
            self._cur[rank] = cur
        return changed

    def phases(self, rank: int, steps: list, pres: list, owns: list, syncs: list) -> None:
        """Sampled phase times of ``rank``, per step in seconds: its time before the collectives
        (data + forward + optimizer), its own time (all but sync) and its sync time. Pooled
        over the rank's last ``window_blocks`` blocks when a block closes."""
        self._phases.add(rank, steps, pres, owns, syncs)

    def activity(self, rank: int, times: list, values: list) -> bool:
        """``rank``'s GPU compute-pipe activity samples (data times; GPM tensor + FP pipes
        summed, None where not read): a rank whose GPU is busier than the others' (see
        :mod:`._activity`). True when a rank was flagged or cleared."""
        if not self._activity.feed(rank, times, values, self._activity_level) and not self._activity.flags:
            return False
        return self._merge()

    def _activity_level(self) -> Optional[float]:
        """The job's step time now for the GPU-activity rule (None before any block was judged)."""
        return self._phases.level_now() if self._phases.has_level else None

    def window(self, rank: int, w: WindowPoint) -> bool:
        """One profiler window of ``rank``; True when ``conditions`` changed."""
        if w.steps <= 0 or not finite_positive(w.step_time_s) or w.compute_s < 0:
            return False
        self._ranks.add(rank)
        changed = False
        for came_or_went in self._windows.add(rank, w, len(self._ranks)):  # (each group judged)
            changed |= self._merge() or came_or_went
        return changed

    def forget(self, rank: int) -> bool:
        self._ranks.discard(rank)
        self._cur.pop(rank, None)
        self._hist.pop(rank, None)
        self._slow.pop(rank, None)
        self._phases.forget(rank)
        old = self._span.pop(rank, None)
        if old is not None:
            self._spans[min(max(old), _MAX_SPAN)] -= 1
            self._wait_blocks = self._lag_blocks()
        self._by_phases.discard(rank)
        self._by_steps.pop(rank, None)
        self._windows.forget(rank)
        self._activity.forget(rank)
        return self.conditions.pop(rank, None) is not None

    def _merge(self) -> bool:
        """``conditions`` from the step blocks, the windows and the GPU activity; True when a
        rank came or went."""
        merged, flags = {}, self._activity.flags
        for rank in set(self._by_steps) | set(self._windows.flagged) | set(flags):
            f = flags.get(rank)
            held = [c for c in (self._by_steps.get(rank), self._windows.flagged.get(rank),
                                f and Condition(STRAGGLER_RANK, self.job, rank, WARNING, f.summary(rank),
                                                f.since, f.step, self.cfg.for_s, found=(GPU_BUSIER,)))
                    if c is not None]
            first = min(held, key=lambda c: c.since)
            merged[rank] = first if len(held) == 1 else \
                dataclasses.replace(first, summary="; ".join(c.summary for c in held),
                                    found=tuple(dict.fromkeys(k for c in held for k in c.found)))
        changed = set(merged) != set(self.conditions)
        self.conditions = merged
        return changed

    def _close(self, rank: int, cur) -> None:
        bid, times, waits, step, time = cur
        old = self._span.get(rank)
        prev, run = old or (0, 0)
        new = self._span[rank] = (prev, run + 1) if rank == self._closer else (run, 1)
        self._closer = rank
        a, b = min(max(old), _MAX_SPAN) if old else -1, min(max(new), _MAX_SPAN)
        if a != b:
            if a >= 0:
                self._spans[a] -= 1
            self._spans[b] += 1
            self._wait_blocks = self._lag_blocks()
        if len(times) * 2 < self.cfg.block_steps:
            return  # a partial block (first block, restart): not comparable
        self._blocks.setdefault(bid, {})[rank] = (median(times), median(waits), step, time,
                                                  self._phases.pooled(rank, bid))
        self._max_block = max(self._max_block, bid)

    def _judge_ready(self) -> bool:
        changed = False
        while self._blocks:
            bid, vals = next(iter(self._blocks.items()))
            complete = len(vals) >= len(self._ranks)
            if not (complete or bid <= self._max_block - self._wait_blocks
                    or len(self._blocks) > _MAX_OPEN_BLOCKS):
                break
            del self._blocks[bid]
            if len(vals) >= 2:
                changed |= self._judge(vals)
        return changed

    def _lag_blocks(self) -> int:
        """How far behind the newest block a block waits for its missing ranks: two of the
        largest batch span among the ranks' last batches, plus two; at most _MAX_OPEN_BLOCKS
        (a rank flushing a backlog after a reconnect would otherwise hold every block).
        O(_MAX_SPAN), called only when some rank's span changed."""
        span = next((k for k in range(_MAX_SPAN, 0, -1) if self._spans[k]), 1)
        return 2 * span + 2

    def _judge(self, vals: dict) -> bool:
        cfg, changed = self.cfg, False
        ranks = list(vals)
        times = [vals[r][0] for r in ranks]
        # The other ranks' medians for every rank at once, O(n log n) (recomputed per rank:
        # O(n^2 log n) per block, minutes for a job of 16,384 ranks).
        mts, mws = medians_without_each(times), medians_without_each([vals[r][1] for r in ranks])
        # Spread: the others' MAD around the others' median, for every rank at once.
        spreads = mads_without_each(times, mts) if len(ranks) >= 4 else None
        hists, counts, size = self._hist, self._slow, cfg.window_blocks
        # phase times: only when every rank of the block sent them
        split = all(vals[r][4] is not None for r in ranks)
        if split:
            m_pre, m_own, m_sync = (medians_without_each([vals[r][4][k] for r in ranks]) for k in range(3))
        self._phases.keep_level(vals, times)
        for i, rank in enumerate(ranks):
            t, w, step, time, own = vals[rank]
            mt, mw = mts[i], mws[i]
            spread = 1.4826 * spreads[i] if spreads is not None else 0.0
            excess = max(t - mt, w - mw)
            floor = max(spread, cfg.jitter_floor_ratio * mt)
            ratio, z = 1 + excess / mt, excess / floor
            hist = hists.get(rank)
            if hist is None:
                hist = hists[rank] = collections.deque(maxlen=size)
            flag = ratio >= cfg.ratio and z >= cfg.robust_z
            by_phase, first = None, False
            if split and not flag:
                by_phase, first, runs = self._phases.judge(rank, own, (m_pre[i], m_own[i], m_sync[i]), mt, floor,
                                                           step, time, rank in self._by_steps)
                if by_phase is not None:
                    flag, ratio = True, 1 + by_phase[0] / mt
            # slow blocks among the last window_blocks, kept as a count (the oldest leaves)
            slow = counts.get(rank, 0) + flag - (len(hist) == size and hist[0][0])
            hist.append((flag, step, time))
            if by_phase is not None and first:
                slow = PhaseRule.count_run(runs[rank], hist)
            counts[rank] = slow
            if slow < cfg.min_blocks and rank not in self._by_steps:
                continue  # the usual rank: not slow enough to flag, nothing held to clear
            changed |= self._update(rank, hist, slow, ratio, t, mt, w, mw, by_phase)
        return changed

    def _update(self, rank, hist, slow, ratio, t, mt, w, mw, by_phase=None) -> bool:
        cfg, old = self.cfg, self._by_steps.get(rank)
        if (old is None and slow < cfg.min_blocks) or (old is not None and slow * 2 < cfg.min_blocks):
            self._by_phases.discard(rank)
            if self._by_steps.pop(rank, None) is None:
                return False  # nothing held for it: nothing to merge again
            self._merge()
            return True
        first: Optional[tuple] = next(((st, tm) for s, st, tm in hist if s), None)
        step, since = (old.step, old.since) if old is not None else first
        blocks = f"in {slow} of the last {len(hist)} blocks since step {step:,}"
        if by_phase is not None:
            summary = _by_phase_text(rank, ratio, by_phase, blocks)
        elif old is not None and rank in self._by_phases:
            return False  # still held: keep the phase figures of the last block that showed them
        else:
            summary = (f"rank {rank} is a straggler: {ratio:.2f}x the other ranks' step time "
                       f"(own step {t * 1e3:.1f} ms vs {mt * 1e3:.1f} ms, data-loader wait {w * 1e3:.1f} ms "
                       f"vs {mw * 1e3:.1f} ms) {blocks}")
        cond = Condition(STRAGGLER_RANK, self.job, rank, WARNING, summary, since, step, cfg.for_s,
                         found=(OWN_WORK,) if by_phase is not None else (STEPS,))
        self._by_steps[rank] = cond
        if by_phase is not None:
            self._by_phases.add(rank)
        else:
            self._by_phases.discard(rank)
        return self._merge() or old is None


def _by_phase_text(rank: int, ratio: float, by_phase: tuple, blocks: str) -> str:
    """A straggler named by its phase times: its own work before the collectives against the
    others', and where the others wait for it."""
    excess, pre, m_pre, sync, m_sync, where = by_phase
    where = "longer in sync" if where == "sync" else WAIT_IN_BACKWARD
    return (f"rank {rank} is a straggler: its own work takes {excess * 1e3:+.1f} ms/step longer "
            f"than the other ranks' ({ratio:.2f}x their step; {BEFORE_COLLECTIVES} "
            f"{pre * 1e3:.1f} vs {m_pre * 1e3:.1f} ms); they wait {(m_sync - sync) * 1e3:+.1f} "
            f"ms/step {where} ({m_sync * 1e3:.1f} vs {sync * 1e3:.1f} ms), {blocks}")
