"""The why's evidence store: :class:`Evidence`, a pipeline listener that keeps, per rank, compact
rings of what a diagnosis compares: blocks of step time and data-loader wait cut as the
straggler rule cuts them (``step // block``, its ``block_steps``, 10 by default; a block of
fewer than half that many usable steps left out), the sampled phase times in blocks, host CPU
seconds, NVML SM clock / power / clock-event reasons and GPM activity (SM, tensor, DRAM),
allocator retries and cudaMalloc/cudaFree calls, and the last window summaries. Memory per rank
is bounded: about 130 KB of rings once full (the GPU samples' half of it) plus 16 window
summaries, copied out of their batches. One caller at a time.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ..wire import SampleColumns, StepColumns
from .._ring import Ring
from ..state import own
from ..detect import median

__all__ = ["Evidence"]

_BLOCKS_KEPT = 600        # step-time blocks kept (6,000 steps at the default 10 a block)
# older blocks merged _OLD_MERGE at a time and kept _OLD_BLOCKS_KEPT more (72,000 steps: 15 min
# of a 12.5 ms job, 48 min of 40 ms), so an onset or a settled level minutes back still has a
# "before" (a real 12.5 ms H200 job: a warning raised 13,000 steps after its onset had none)
_OLD_MERGE, _OLD_BLOCKS_KEPT = 20, 360
_SAMPLES_KEPT = 900       # 15 min of 1 Hz host / NVML / allocator samples
_WINDOWS_KEPT = 16
_RECENT_WINDOWS = 8
# GpuSample fields kept per sample, after its time: (time, sm clock, power, clock-event reasons,
# SM activity, tensor activity, DRAM bandwidth)
_GPU_FIELDS = ("sm_clock_hertz", "power_watts", "clock_event_reasons", "sm_active_ratio",
               "tensor_active_ratio", "dram_active_ratio")
_PHASE_BLOCK = 8          # sampled phase times per block median
_PHASE_BLOCKS_KEPT = 400  # 3,200 sampled steps
# a straggler's phases are compared with at most this many other ranks', over its newest this
# many phase blocks after its onset
_OTHERS, _PHASE_BLOCKS_COMPARED = 64, 30


@dataclasses.dataclass
class _Rank:
    # Typed-array rings, not deques of tuples: 900 GPU samples of 10,000 ranks as tuples are 9
    # million objects for the garbage collector to walk (collector/_ring.py).
    # (first step, last step, end time, median step time, mean wait without its largest) per 10 steps
    blocks: Ring = dataclasses.field(default_factory=lambda: Ring("QQddd", _BLOCKS_KEPT))
    # blocks that left ``blocks``, as the same rows, _OLD_MERGE merged into one (the median of
    # their medians, the mean of their waits), and those not merged yet
    old: Ring = dataclasses.field(default_factory=lambda: Ring("QQddd", _OLD_BLOCKS_KEPT))
    leaving: list = dataclasses.field(default_factory=list)
    # steps not yet in a block, as columns: step, end time, step time, wait
    pending: tuple = dataclasses.field(default_factory=lambda: ([], [], [], []))
    host: Ring = dataclasses.field(default_factory=lambda: Ring("dd", _SAMPLES_KEPT))  # (time, cpu s)
    # (time, *_GPU_FIELDS); clock_event_reasons is an integer bitmask
    gpu: Ring = dataclasses.field(default_factory=lambda: Ring("dddqddd", _SAMPLES_KEPT, nullable=True))
    # (time, allocator retries, cudaMalloc + cudaFree calls), cumulative
    alloc: Ring = dataclasses.field(default_factory=lambda: Ring("dQQ", _SAMPLES_KEPT))
    # The newest _RECENT_WINDOWS windows, and older ones thinned to keep the time they span
    # (an onset dated 5 s or minutes back still has a window before it).
    windows: list = dataclasses.field(default_factory=list)
    # (first step, last step, end time, points seen, 5 device phase means, 5 host ones; each
    # without its largest value) per
    # _PHASE_BLOCK sampled steps with the same points seen
    phases: Ring = dataclasses.field(default_factory=lambda: Ring("QQdQ" + "d" * 10, _PHASE_BLOCKS_KEPT))
    phase_pending: list = dataclasses.field(default_factory=list)  # (step, end, points, 10 values)


class Evidence:
    """Pipeline listener keeping the per-rank history :func:`diagnose` reads."""

    def __init__(self, block: int = 10) -> None:
        self._ranks: dict[tuple, _Rank] = {}
        self._jobs: dict[str, set] = {}  # job -> its ranks here
        self.block = block  # steps per step-time block (by step number)

    def rank(self, job: str, rank: int) -> Optional[_Rank]:
        return self._ranks.get((job, rank))

    def others(self, job: str, rank: int, limit: int = _OTHERS) -> list[_Rank]:
        """Up to ``limit`` other ranks of ``job`` (the lowest numbers), for a comparison."""
        mine = sorted(r for r in self._jobs.get(job, ()) if r != rank)[:limit]
        return [self._ranks[job, r] for r in mine]

    def on_batch(self, hello: agent_pb2.Hello, batch: agent_pb2.Batch, now: float,
                 steps: StepColumns, samples: SampleColumns) -> None:
        r = self._ranks.get((hello.job, hello.rank))
        if r is None:
            r = self._ranks[hello.job, hello.rank] = _Rank()
            self._jobs.setdefault(hello.job, set()).add(hello.rank)
        c = steps
        if len(c):
            cols = (c.step, c.end_time_s, c.duration_s, c.dataloader_wait_s)
            if c.profiled or not min(c.duration_s) > 0:
                skip, dur = set(c.profiled), c.duration_s
                keep = [i for i in range(len(dur)) if i not in skip and dur[i] > 0]
                cols = tuple([col[i] for i in keep] for col in cols)
            for have, new in zip(r.pending, cols):
                have.extend(new)
            _cut_blocks(r, self.block)
        if c.phase_times is not None:
            _keep_phases(r, c.phase_times)
        s = samples
        if len(s.host):
            r.host.extend_columns(s.host["time_s"], s.host["cpu_seconds"])
        if len(s.gpu):
            r.gpu.extend_columns(s.gpu["time_s"], *[s.gpu.optional(f) for f in _GPU_FIELDS])
        if len(s.allocator):
            a = s.allocator
            r.alloc.extend_columns(a["time_s"], a["alloc_retries"],
                                   [m + f for m, f in zip(a["device_allocs"], a["device_frees"])])
        for w in batch.windows or ():  # (an empty repeated field: its truth is cheaper than its loop)
            if w.last_step >= w.first_step:
                _keep_window(r.windows, own(w))

    def forget(self, keys) -> None:
        for key in keys:
            if self._ranks.pop(key, None) is not None:
                ranks = self._jobs.get(key[0])
                ranks.discard(key[1])
                if not ranks:
                    del self._jobs[key[0]]


_HOST_CLOCK = 1 << 8  # in a phase block's points: timed on the host clock (no GPU)


def _keep_phases(r: _Rank, p) -> None:
    pending = r.phase_pending
    for i in range(len(p)):
        points = p.points[i] | (_HOST_CLOCK if p.clock[i] != agent_pb2.STEP_CLOCK_CUDA_EVENT else 0)
        pending.append((p.step[i], p.end_time_s[i], points, [d[i] for d in p.device] + [h[i] for h in p.host]))
    while len(pending) >= _PHASE_BLOCK:
        rows, points = pending[:_PHASE_BLOCK], pending[0][2]
        del pending[:_PHASE_BLOCK]
        rows = [row for row in rows if row[2] == points]  # (points seen change rarely: a block of one kind)
        values = [_trimmed_mean([row[3][k] for row in rows]) for k in range(10)]
        r.phases.append(rows[0][0], rows[-1][0], rows[-1][1], points, *values)


def _cut_blocks(r: _Rank, size: int) -> None:
    """Close the pending steps' blocks (``step // size``) that a later block's step has
    followed, a block of fewer than half ``size`` usable steps left out; a step number lower than
    the one before (a restarted rank) closes the block before it too."""
    steps, ends, durs, waits = r.pending
    n, i, rows = len(steps), 0, []
    while i < n:
        bid, j = steps[i] // size, i + 1
        while j < n and steps[j] // size == bid:
            j += 1
        if j == n:
            break  # the newest block: open until a later step comes
        if (j - i) * 2 >= size:
            rows.append((steps[i], steps[j - 1], ends[j - 1], median(durs[i:j]),
                         _trimmed_mean(_no_negative(waits[i:j]))))
        i = j
    if rows:
        spill = len(r.blocks) + len(rows) - r.blocks.maxlen
        if spill > 0:
            kept = len(r.blocks)
            _keep_old(r, [r.blocks[k] for k in range(min(spill, kept))] + rows[:max(0, spill - kept)])
        r.blocks.extend_columns(*map(list, zip(*rows)))
    if i:
        for col in r.pending:
            del col[:i]


def _keep_old(r: _Rank, rows: list) -> None:
    """Blocks leaving the ring of recent ones, merged ``_OLD_MERGE`` at a time into ``r.old``."""
    leaving = r.leaving
    leaving.extend(rows)
    while len(leaving) >= _OLD_MERGE:
        part = leaving[:_OLD_MERGE]
        del leaving[:_OLD_MERGE]
        r.old.append(part[0][0], part[-1][1], part[-1][2], median([b[3] for b in part]),
                     sum(b[4] for b in part) / len(part))


def _trimmed_mean(values: list) -> float:
    """The mean without the largest value (with three or more): a block's time per step.
    Not the median: two loader workers slower than the step make every other step wait
    (20 ms, 0.1 ms, 20 ms, ...; measured on an H100), whose median says nothing waited; the one
    largest value left out is an evaluation or checkpoint pause inside the block."""
    if len(values) < 3:
        return sum(values) / len(values)
    return (sum(values) - max(values)) / (len(values) - 1)


def _no_negative(waits: list) -> list:
    """Waits with the negative ones as 0 (a list of positive waits as it is)."""
    return waits if min(waits) > 0.0 else [w if w > 0.0 else 0.0 for w in waits]


def _keep_window(kept: list, w: agent_pb2.WindowSummary) -> None:
    """Append ``w``; beyond _WINDOWS_KEPT drop, among the older ones (the newest
    _RECENT_WINDOWS stay), the one whose neighbours are closest in time: the spacing of what is
    kept grows with age, so it reaches back roughly geometrically."""
    kept.append(w)
    if len(kept) <= _WINDOWS_KEPT:
        return
    older = len(kept) - _RECENT_WINDOWS
    drop = min(range(1, older), key=lambda i: kept[i + 1].start_time_s - kept[i - 1].start_time_s)
    del kept[drop]
