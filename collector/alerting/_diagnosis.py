"""Why a rank got slower: what changed between before and after an alert's onset.

:class:`Evidence` is a pipeline listener that keeps, per rank, compact rings of what the
diagnosis compares: blocks of step time and data-loader wait cut as the straggler rule cuts
them (``step // block``, its ``block_steps``, 10 by default; a block of fewer than half that many
usable steps left out), host CPU seconds, NVML
SM clock / power / clock-event reasons and GPM activity (SM, tensor, DRAM), allocator retries
and cudaMalloc/cudaFree calls,
and the last window summaries.
:func:`diagnose` compares the data before an onset time with the data after it and ranks the
contributors by their change in milliseconds per step against the step-time change:

    backward +5.1 ms/step (aten::mm +4.8 ms); data-loader wait +0.0 ms; clocks unchanged

With the agents' always-on phase times (data, forward, backward, sync, optimizer of sampled
steps, on the device's timeline) the contributors are those phases, in ms/step before -> after,
with no window needed: a phase whose host time grew as much as its device time (and is as
long) kept the device waiting for the host's launches, and only then is the host named
("host-bound"), never when the device's SM or tensor activity rose across the onset (its
launches then waited on a full queue); the host's CPU time that grew is a note, never ranked as
a cause of its own: the host-bound phases' work, or the host waiting for a busier device. "Before" ends a guard band
ahead of the onset (30 s, at most a quarter of the data): a change that grows in is dated
where it stands out, and the blocks just ahead of that already hold part of it. A window on
each side adds the kernel or operator that grew.
Without phase times the phases come from profiler windows (forward, backward, optimizer,
communication, other), which need one on each side of the onset; until one exists after it the
diagnosis says so and is refreshed when it arrives. Memory per rank is bounded: about 130 KB of
rings once full (the GPU samples' half of it) plus 16 window summaries, copied out of their
batches. One caller at a time.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ..wire._columns import PHASES, SampleColumns, StepColumns
from .._ring import Ring
from ..state._state import own
from ..detect._types import median

__all__ = ["Evidence", "Diagnosis", "diagnose", "against_others", "compare_windows", "fmt"]

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
_PHASES = ("forward", "backward", "optimizer", "communication", "other")
_EXPLAINED = 0.3          # a top contributor below this share of the change explains nothing
_PHASE_BLOCK = 8          # sampled phase times per block median
_PHASE_BLOCKS_KEPT = 400  # 3,200 sampled steps
# a phase is host-bound when its host time grew by this share of its device time's growth
# and is at least _HOST_LONG of its device time after the onset
_HOST_GREW, _HOST_LONG = 0.6, 0.8
# the host is the change when at least two phases grew host-bound, by shares of their own time
# within _HOST_EVEN of each other, and hold _HOST_ALL of all the phases' growth (a launch-bound
# H200 job whose host slowed: backward +1.0, forward +0.6, optimizer +0.2 ms, each 13-19% of
# its time, the GPU's clock flat; dated at the first of the host's degrees, the two minutes
# after held forward +7.5%, optimizer +12%, backward +16%: 2.1x apart, as on a 2-GPU job whose
# host slowed by degrees, forward +3.4%, backward +7.2%; a slow data loader on an H100 grew
# data +4.1 ms and forward +0.5: host-bound both, by 8x and 3% of their time: the loader, not
# the host), none of them
# over _HOST_ONE of their sum (GEMMs in an H100 job's forward: forward +7.3 and data +0.2 ms,
# even shares but one phase: the forward)
_HOST_ALL, _HOST_EVEN, _HOST_ONE = 0.8, 2.5, 0.75
# ... the evenness judged on the phases holding at least this share of the phases' time before
# (when two do): a short phase's share is mostly its noise (a launch-bound 2 x H200 job whose
# host slowed: forward, backward and sync +7-10% of their time, the 1.5 ms data phase +19%)
_HOST_EVEN_MIN = 0.1
# the diagnosis's "before" ends this long ahead of the onset (at most this share of the data)
_GUARD_S, _GUARD_SHARE = 30.0, 0.25
# "after" is at most this long from the onset: the diagnosis is of the change where it began.
# It is made again as data comes until a window completes it, and a job that recovered while
# its episode was still open diluted it (2 x H200, a host hump of +10% for 90 s: backward and
# forward +2 ms/step each, host-bound, at the raise; +0.2..0.5 ms/step 2.5 minutes later)
_AFTER_S = 120.0
# a straggler's phases are compared with at most this many other ranks', over its newest this
# many phase blocks after its onset
_OTHERS, _PHASE_BLOCKS_COMPARED = 64, 30
# the host's time before the optimizer step grew this much more than the device's: it waits there
_HOST_WAITED_MS = 2.0
# device activity (SM or tensor, GPM) up by this much across the onset: the device got busier
_BUSIER = 0.05
# allocator churn is named when its cudaMalloc + cudaFree calls per step rose by this many, to
# this many times the rate before
_CHURN_MORE, _CHURN_TIMES = 1.0, 3.0


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


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    text: str                      # one line for the alert
    contributors: tuple            # ((name, delta ms per step, detail), ...) ranked
    step_delta_ms: float
    complete: bool                 # a window after the onset was compared
    churn: str = ""                # the allocator churn named first ("" when none)
    busier: tuple = ()             # device activities that rose ("tensor activity 16% -> 22%", ...)


def _median(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _step_median(rows: list, k: int) -> Optional[float]:
    """The median of column ``k`` of step-time block rows, each weighted by the steps it covers.
    Recent rows hold 10 steps and merged old rows 200: an equal-weight median over a span that
    reaches back into the merged rows is the recent rows' median. On a real 10.6 ms H200 job
    whose host slowed for five minutes and recovered in its last minute, that read the episode's
    +0.8 ms/step as -0.1 ("no measured contributor explains")."""
    pts = sorted((row[k], row[1] - row[0] + 1) for row in rows)
    if not pts:
        return None
    total, seen = sum(w for _, w in pts), 0
    for i, (v, w) in enumerate(pts):
        seen += w
        if 2 * seen > total:
            return v
        if 2 * seen == total:  # the halves meet between two values
            return (v + pts[i + 1][0]) / 2
    return pts[-1][0]


def _per_step(w: agent_pb2.WindowSummary) -> float:
    """1 / the number of profiled steps (from the breakdown: span / step time)."""
    if w.span_s > 0 and w.breakdown.step_time_s > 0:
        return w.breakdown.step_time_s / w.span_s
    return 1.0 / max(1, w.last_step - w.first_step + 1)


def _phases(w: agent_pb2.WindowSummary) -> dict[str, float]:
    b = w.breakdown
    return {"forward": b.forward_s, "backward": b.backward_s, "optimizer": b.optimizer_s,
            "communication": b.communication_s, "other": b.other_s}


def _named(w: agent_pb2.WindowSummary) -> dict[str, float]:
    """Seconds per step by kernel name (GPU windows) or operator name (CPU windows)."""
    items = w.top_kernels if w.top_kernels else w.top_ops
    return {n.name: n.seconds * _per_step(w) for n in items}


def _cpu_per_step(host, blocks, lo: float, hi: float) -> Optional[float]:
    """Trainer CPU seconds per step between data times lo and hi."""
    return _counter_per_step([(t, c) for t, c in host if lo <= t <= hi], blocks, lo, hi)


def _counter_per_step(pts: list, blocks, lo: float, hi: float) -> Optional[float]:
    """The growth per step of a cumulative counter sampled as ``pts`` ((time, value), data
    times within lo..hi), the steps counted from the blocks ending in the same span."""
    bl = [b for b in blocks if lo <= b[2] <= hi]
    if len(pts) < 2 or len(bl) < 2:
        return None
    steps = bl[-1][1] - bl[0][1]
    growth = (pts[-1][1] - pts[0][1]) * ((bl[-1][2] - bl[0][2]) / max(1e-9, pts[-1][0] - pts[0][0]))
    return growth / steps if steps > 0 else None


def diagnose(r: Optional[_Rank], since: float, reference: Optional[tuple] = None) -> Optional[Diagnosis]:
    """Compare before and after data time ``since``; None without step data on both sides.
    ``reference``: (start, end) data times of the level the alert compares against (a drift
    episode raised against the job's settled level): "before" is those times when the rings
    still hold 3 blocks of them."""
    if r is None:
        return None
    # each ring made into rows once (they are read several times below)
    until = since + _AFTER_S
    blocks = [b for b in (*r.old, *r.leaving, *r.blocks) if b[2] < until]
    host, gpu = [h for h in r.host if h[0] < until], [g for g in r.gpu if g[0] < until]
    alloc, phases = [a for a in r.alloc if a[0] < until], [p for p in r.phases if p[2] < until]
    if not blocks:
        return None
    after = [b for b in blocks if b[2] >= since]
    # "before" ends a guard band ahead of the onset: a change that grows in is dated where it
    # stands out (an H100 job's GEMMs in backward: dated 23 s late, the blocks between holding
    # most of the change)
    edge = since - min(_GUARD_S, _GUARD_SHARE * (since - blocks[0][2]))
    before = [b for b in blocks if b[2] < edge]
    wide = None  # the phases' span when the settled level's times hold under 3 phase blocks
    if reference is not None and reference[1] < edge:
        settled = [b for b in before if reference[0] <= b[2] < reference[1]]
        if len(settled) >= 3:
            wide = (before[max(0, len(before) - 60)][2], edge, since)
            before, edge = settled, reference[1]
    if len(before) < 3 or len(after) < 3:
        return None
    step_delta = (_step_median(after, 3) - _step_median(before, 3)) * 1e3
    wait = (_step_median(after, 4) - _step_median(before, 4)) * 1e3
    lo = before[max(0, len(before) - 60)][2]
    cpu_b = _cpu_per_step(host, blocks, lo, edge)
    cpu_a = _cpu_per_step(host, blocks, since, after[-1][2])
    cpu = (cpu_a - cpu_b) * 1e3 if cpu_b is not None and cpu_a is not None else None
    w_before = [w for w in r.windows if w.start_time_s < since]  # (a window is whole: no guard)
    w_after = [w for w in r.windows if w.start_time_s >= since]
    complete = bool(w_before and w_after)
    busier = _busier(gpu, lo, edge, since)
    found, first, last = _contributors(phases, (lo, edge, since), wait, cpu, w_before, w_after, bool(busier), wide)
    ranked = sorted(found, key=lambda c: -_rank_key(c, step_delta))
    text = "; ".join(fmt(c) for c in ranked[:3])
    if step_delta <= 0 or ranked[0][1] < _EXPLAINED * step_delta:
        text = f"no measured contributor explains the {step_delta:+.1f} ms/step; " + text
    tail = [*first, _clocks(gpu, since), _activity(gpu, since), _retries(alloc, since), *last]
    churn = _churn(alloc, blocks, lo, edge, since, after[-1][2])
    text = "; ".join(t for t in [churn, text, *tail] if t)
    return Diagnosis(text, tuple(ranked), step_delta, complete, churn.split(" (", 1)[0], busier)


def _contributors(rows: list, span: tuple, wait: float, cpu: Optional[float],
                  w_before: list, w_after: list, busier: bool,
                  wide: Optional[tuple] = None) -> tuple[list, list, list]:
    """The candidate causes (name, ms/step, detail) and the notes that go before and after the
    clock, activity and retry notes: from the phase times when the rank sent enough of them on
    both sides (a window on each side adds the kernel), else the data-loader wait, host CPU and
    the windows' comparison. ``rows``: the rank's phase blocks. ``wide``: a span for the phases
    when ``span`` (the settled level's times) holds under 3 phase blocks: the phase sampler
    spends a share of wall time since attach, so its first samples can come late in a short
    settle window (the CPU test jobs settle in 6 s; beside a CPU burner their first samples came
    3.4-3.8 s after their first step)."""
    phased = _phase_contributors(rows, span, wait, cpu, busier)
    if phased is None and wide is not None:
        phased = _phase_contributors(rows, wide, wait, cpu, busier)
    if phased is None and rows and rows[0][2] < span[1]:
        # the newest phase blocks of the kind seen after the onset, however far before it: a
        # device phase that grew is named before the host's CPU time (an H200 job whose AdamW
        # turned to its for-loop read "host CPU +8.5 ms/step" without them)
        phased = _phase_contributors(rows, (rows[0][2], span[1], span[2]), wait, cpu, busier)
    if phased is not None:
        found, note = phased
        if w_before and w_after:
            found = _add_kernel(found, w_before[-1], w_after[-1])
        return found, [note], []
    found = [("data-loader wait", wait, "")]
    if cpu is not None:
        found.append(("host CPU", cpu, ""))
    if w_before and w_after:
        found.extend(compare_windows(w_before[-1], w_after[-1]))
        found = _discount_gpu_wait(found, w_before[-1], w_after[-1])
        return found, [], []
    return found, [], ["phases: no profiler window from before the onset" if not w_before
                   else "phases: no profiler window after the onset yet"]


def _phase_contributors(rows: list, span: tuple, wait: float, cpu: Optional[float],
                        busier: bool) -> Optional[tuple[list, str]]:
    """The phases' changes (ms/step) from phase-time blocks in ``lo..edge`` to those from
    ``since`` on (``span``), and a note on the host's CPU time; None without 3 blocks on each
    side of one kind of points seen. ``busier``: the device's activity rose across the onset,
    so a phase's longer host time is its launches waiting on a full queue, never host-bound."""
    lo, edge, since = span
    after = [p for p in rows if p[2] >= since]
    if len(after) < 3:
        return None
    points = after[-1][3]
    after = [p for p in after if p[3] == points]
    before = [p for p in rows if lo <= p[2] < edge and p[3] == points][-60:]
    if len(before) < 3 or len(after) < 3:
        return None
    med = [(_median(p[4 + k] for p in before), _median(p[4 + k] for p in after)) for k in range(10)]
    grew = [((da - db) * 1e3, (ha - hb) * 1e3) for (db, da), (hb, ha) in zip(med[:5], med[5:])]
    waits = _host_waits_before_optimizer(grew, points)
    out, bound, skipped = [], 0.0, []
    shares: dict = {}  # a host-bound phase's growth over its time before
    for k, name in enumerate(PHASES):
        (db, da), (hb, ha) = med[k], med[5 + k]
        d, h = grew[k]
        if k < 4 and not points >> k & 1:
            skipped.append(name)  # not seen: its time is in the next phase seen
            continue
        if waits and name == "optimizer":
            continue  # (its launches started late: counted with the wait before it)
        label = "+".join(skipped + [name])
        skipped = []
        parts = []
        if name == "data" and abs(wait) >= 0.1:
            parts.append(f"data-loader wait {wait:+.1f} ms")
        if waits and name == "sync":
            d += grew[4][0]
            out.append((label, d, f"the host now waits for the device before the optimizer step (its host time "
                                  f"here {h:+.1f} ms: a synchronize, .item() or copy to the host), so the optimizer's "
                                  f"launches start late (optimizer {grew[4][0]:+.1f} ms)"))
            continue
        if name == "sync" and d >= 0.1:
            parts.append("after backward, before the optimizer step: all-reduce wait, clipping")
        # (on the host clock, CPU-only jobs, device and host time are one: nothing to tell apart)
        if not points & _HOST_CLOCK and not busier and d >= 0.1 and h >= _HOST_GREW * d and ha >= _HOST_LONG * da:
            parts.append(f"host-bound: its host time {h:+.1f} ms")
            bound += d
            shares[label] = (d / max(db * 1e3, 1e-6), db)
        out.append((label, d, ", ".join(parts)))
    out = _host_slower(out, shares, sum(db for db, _ in med[:5]))
    note = ""
    if cpu is not None and abs(cpu) >= 0.5:
        if points & _HOST_CLOCK:
            out.append(("host CPU", cpu, ""))
        elif bound >= 0.5:
            # the host's extra work is the host-bound phases' (named there, with where it went):
            # ranked on its own it led a for-loop optimizer's +1.5 ms/step on an H200 by a hair
            note = f"host CPU {cpu:+.1f} ms/step (in the host-bound phases)"
        else:
            note = f"host CPU {cpu:+.1f} ms/step (the host waiting for the device, not a cause)"
    return out, note


def _host_slower(out: list, shares: dict, before_s: float = 0.0) -> list:
    """``out`` with its host-bound phases made one "host" contributor (their sum, each named in
    its detail) when there are at least two, each grew by a share of its own time within
    ``_HOST_EVEN`` of the others' (among those holding ``_HOST_EVEN_MIN`` of the phases' time
    ``before_s``, when two do), none over ``_HOST_ONE`` of their sum, and together they hold
    ``_HOST_ALL`` of the phases' growth: the host launches more slowly (or does more per launch)
    in every phase alike and the GPU waits for it; no one phase of the job's code is the cause.
    ``shares``: per host-bound phase, (growth / its time before, its time before in seconds)."""
    bound = [c for c in out if c[0] in shares]  # (a phase is host-bound only when it grew)
    grew = sum(c[1] for c in out if c[1] > 0)
    total = sum(c[1] for c in bound)
    even = [share for share, db in shares.values() if db >= _HOST_EVEN_MIN * before_s]
    if len(even) < 2:
        even = [share for share, _ in shares.values()]
    if (len(bound) < 2 or total < _HOST_ALL * grew or max(even) > _HOST_EVEN * min(even)
            or max(c[1] for c in bound) > _HOST_ONE * total):
        return out
    each = ", ".join(f"{name} {d:+.1f}" for name, d, _ in sorted(bound, key=lambda c: -c[1]))
    host = ("host", total, f"slower in every phase that grew ({each} ms/step), each host-bound: the "
                           "GPU waits for the host's launches, not for its own work")
    return [host] + [c for c in out if c[0] not in shares]


def against_others(r: Optional[_Rank], others: list, since: float) -> str:
    """A slow rank's own phases against the other ranks' since ``since`` (the straggler's onset),
    as a clause: the phases where it spends longer than the median of the others' medians,
    largest first (sync left out: the others wait there for it), with the host named where its
    host time is longer by as much ("host-bound", as in :func:`diagnose`). The comparison is in
    the same seconds, so a host that wanders under all ranks cancels out, where before -> after
    on the slow rank alone did not: 2 x H200, GEMMs in rank 1's backward, read "no measured
    contributor" before -> after and "backward +1.4 ms/step (11.8 vs 10.4 ms)" against rank 0.
    "" without 3 phase blocks after ``since`` on the rank and on some other rank."""
    mine = _phase_medians(r, since)
    if mine is None:
        return ""
    theirs = [m for m in (_phase_medians(o, since, mine[0]) for o in others) if m is not None]
    if not theirs:
        return ""
    points, own = mine
    found = []
    for k, name in enumerate(PHASES):
        if name == "sync" or (k < 4 and not points >> k & 1):
            continue
        other_d = _median(t[1][k] for t in theirs)
        other_h = _median(t[1][5 + k] for t in theirs)
        d, h = (own[k] - other_d) * 1e3, (own[5 + k] - other_h) * 1e3
        if d < 0.1:
            continue
        label = f"{name} {d:+.1f} ms/step ({own[k] * 1e3:.1f} vs {other_d * 1e3:.1f} ms"
        if not points & _HOST_CLOCK and h >= _HOST_GREW * d and own[5 + k] >= _HOST_LONG * own[k]:
            label += f", host-bound: its host time {h:+.1f} ms"
        found.append((d, label + ")"))
    if not found:
        return ""
    found.sort(key=lambda f: -f[0])
    return "against the other ranks: " + "; ".join(label for _, label in found[:2])


def _phase_medians(r: Optional[_Rank], since: float, points: Optional[int] = None):
    """(points, medians of the 10 phase columns) of ``r``'s phase blocks from ``since`` on, of one
    kind of points seen (the newest block's, or ``points``); None under 3 such blocks."""
    if r is None:
        return None
    rows = [p for p in r.phases if p[2] >= since]
    if not rows:
        return None
    points = rows[-1][3] if points is None else points
    rows = [p for p in rows if p[3] == points][-_PHASE_BLOCKS_COMPARED:]
    if len(rows) < 3:
        return None
    return points, [_median(p[4 + k] for p in rows) for k in range(10)]


def _host_waits_before_optimizer(grew: list, points: int) -> bool:
    """The host's time between the last gradient and the optimizer step grew by
    ``_HOST_WAITED_MS`` more than the device's, and the optimizer's device time grew while its
    host time did not: the host blocks on the device there (a synchronize, ``.item()``, a copy
    to the host) and then launches the optimizer onto an idle device. Real jobs, a synchronize
    before the optimizer step (H100 and H200): host time in that gap +6.4..8.0 ms, the device's
    +0.2 ms, the optimizer's device time +1.4..1.9 ms with its host time unchanged."""
    if points & _HOST_CLOCK or not points >> 3 & 1:
        return False
    (ds, hs), (do, ho) = grew[3], grew[4]
    return hs - ds >= _HOST_WAITED_MS and do > 0 and ho < _HOST_GREW * do


def _add_kernel(found: list, wb: agent_pb2.WindowSummary, wa: agent_pb2.WindowSummary) -> list:
    """The kernel or operator that grew most from window ``wb`` to ``wa``, named on the phase
    that grew most when it accounts for >= 25% of that phase's growth."""
    nb, na = _named(wb), _named(wa)
    top = max(na, key=lambda n: na[n] - nb.get(n, 0.0), default=None)
    if top is None or not found:
        return found
    grew = (na[top] - nb.get(top, 0.0)) * 1e3
    phases = [j for j, c in enumerate(found) if c[0] != "host CPU"]
    if not phases:
        return found
    i = max(phases, key=lambda j: found[j][1])
    name, d, detail = found[i]
    if grew > 0 and grew >= 0.25 * d and not name.startswith("data"):
        extra = f"{_short(top)} +{grew:.1f} ms" + ("" if top in nb else ", new")
        found = list(found)
        found[i] = (name, d, f"{detail}, {extra}" if detail else extra)
    return found


def compare_windows(wb: agent_pb2.WindowSummary, wa: agent_pb2.WindowSummary) -> list[tuple[str, float, str]]:
    """Phase changes per step (ms) from window ``wb`` to ``wa``, largest first: a phase's wall
    share, or the GPU work launched in it when that grew more ("GPU work" in the detail); the
    phase that grew most names the kernel/op that grew most when it accounts for >= 25% of it
    (windows do not say which phase a kernel ran in)."""
    pb, pa = _phases(wb), _phases(wa)
    gb, ga = _gpu_work(wb), _gpu_work(wa)
    nb, na = _named(wb), _named(wa)
    top = max(na, key=lambda n: na[n] - nb.get(n, 0.0), default=None)
    grew = (na[top] - nb.get(top, 0.0)) * 1e3 if top is not None else 0.0
    work = {p: (ga[p] - gb[p]) * 1e3 for p in ga if p in gb}
    deltas, by_work, delayed = [], set(), {}
    for p in _PHASES:
        d = (pa[p] - pb[p]) * 1e3
        if p in work and work[p] > d:
            # Profiled steps are slower on the host: extra GPU work can fill idle time the phase
            # was already charged for, so its wall share hardly moves while its GPU work grows.
            d = work[p]
            by_work.add(p)
        elif work:
            # A phase longer by more than its own GPU work, while another phase's GPU work grew,
            # was (up to that growth) held up by that work: GEMMs queued in forward run while
            # the host is in backward and delay backward's kernels (measured on an H100: forward
            # +2.0 ms of GPU work showed as backward +2.5 ms of wall time).
            others = sum(max(0.0, v) for q, v in work.items() if q != p)
            excess = d - max(0.0, work.get(p, 0.0))
            if others > 0 and excess > 0:
                delayed[p] = min(excess, others)
                d -= delayed[p]
        deltas.append((p, d))
    out = []
    for i, (p, d) in enumerate(sorted(deltas, key=lambda x: -x[1])):
        parts = ["GPU work"] if p in by_work and d >= 0.1 else []
        if delayed.get(p, 0.0) >= 0.1:
            parts.append(f"after {delayed[p]:.1f} ms of delay by other phases' GPU work")
        if i == 0 and grew > 0 and grew >= 0.25 * d:
            parts.append(f"{_short(top)} +{grew:.1f} ms" + ("" if top in nb else ", new"))
        out.append((p, d, ", ".join(parts)))
    return out


def _gpu_work(w: agent_pb2.WindowSummary) -> dict[str, float]:
    """GPU work per step launched in each phase (windows with a device timeline only)."""
    b = w.breakdown
    if not w.gpu_event_count or not (b.forward_gpu_s or b.backward_gpu_s or b.optimizer_gpu_s):
        return {}
    return {"forward": b.forward_gpu_s, "backward": b.backward_gpu_s, "optimizer": b.optimizer_gpu_s}


def _gpu_work_per_step(w: agent_pb2.WindowSummary) -> Optional[float]:
    """GPU busy seconds per step of a window with a device timeline, else None."""
    if not w.gpu_event_count or w.span_s <= 0 or w.breakdown.step_time_s <= 0:
        return None
    return w.gpu_busy_ratio * w.breakdown.step_time_s


def _discount_gpu_wait(found: list, wb: agent_pb2.WindowSummary, wa: agent_pb2.WindowSummary) -> list:
    """A host waiting for a busier GPU (``loss.item()``, a synchronize) spins: its CPU time per
    step grows with the GPU's work. Host CPU growth up to the GPU busy-time growth is that wait,
    not a cause (measured on an H200: +6.1 ms of GEMMs showed as host CPU +6.6 ms)."""
    gb, ga = _gpu_work_per_step(wb), _gpu_work_per_step(wa)
    if gb is None or ga is None or ga <= gb:
        return found
    wait = (ga - gb) * 1e3
    return [(name, delta - min(delta, wait), f"after {min(delta, wait):.1f} ms of waiting for the GPU")
            if name == "host CPU" and delta > 0 else (name, delta, detail) for name, delta, detail in found]


def _rank_key(c: tuple, step_delta: float) -> float:
    """Named contributors before "other" (the unattributed rest) and host CPU (which overlaps
    the phases) unless those explain much more."""
    name, delta, _ = c
    return delta * (0.5 if name in ("other", "host CPU") else 1.0)


def fmt(c: tuple) -> str:
    name, delta, detail = c
    return f"{name} {delta:+.1f} ms/step" + (f" ({detail})" if detail else "")


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[:limit - 3] + "..."


def _clocks(gpu, since: float) -> str:
    before = [g for g in gpu if g[0] < since]
    after = [g for g in gpu if g[0] >= since]
    if not before or not after:
        return ""
    sm_b, sm_a = _median(g[1] for g in before), _median(g[1] for g in after)
    reasons = {g[3] for g in after if g[3]} - {g[3] for g in before if g[3]}
    if sm_b and sm_a and abs(sm_a - sm_b) / sm_b >= 0.03:
        return f"SM clock {sm_b / 1e9:.2f} -> {sm_a / 1e9:.2f} GHz"
    return "clocks unchanged" if not reasons else f"new clock-event reasons {sorted(reasons)}"


def _activity(gpu, since: float) -> str:
    """GPM activity that moved by >= 5 points across the onset ("tensor activity 78% -> 61%")."""
    moved = _gpm_moves([g for g in gpu if g[0] < since], [g for g in gpu if g[0] >= since])
    return "; ".join(f"{label} {b:.0%} -> {a:.0%}" for label, b, a in moved if abs(a - b) >= 0.05)


def _gpm_moves(before: list, after: list) -> list[tuple[str, float, float]]:
    """(label, median before, median after) of the GPM activities (SM, tensor, DRAM) sampled on
    both sides."""
    out = []
    for i, label in ((4, "SM activity"), (5, "tensor activity"), (6, "DRAM bandwidth")):
        b, a = _median(g[i] for g in before), _median(g[i] for g in after)
        if b is not None and a is not None:
            out.append((label, b, a))
    return out


def _churn(alloc, blocks, lo: float, edge: float, since: float, hi: float) -> str:
    """The caching allocator's cudaMalloc/cudaFree calls per step, before -> after the onset,
    when they rose by at least _CHURN_MORE per step to _CHURN_TIMES the rate before: a named
    cause, put first (each call synchronous on the host; ``torch.cuda.empty_cache()`` each step,
    or memory pressure, makes them). A steady job makes almost none."""
    before = _counter_per_step([(a[0], a[2]) for a in alloc if lo <= a[0] < edge], blocks, lo, edge)
    after = _counter_per_step([(a[0], a[2]) for a in alloc if since <= a[0] <= hi], blocks, since, hi)
    if before is None or after is None or after - before < _CHURN_MORE or after < _CHURN_TIMES * before:
        return ""
    return (f"allocator churn: cudaMalloc/cudaFree {before:.1f} -> {after:.1f} per step (the cache emptied "
            f"or under memory pressure; each call waits on the host)")


def _busier(gpu, lo: float, edge: float, since: float) -> tuple[str, ...]:
    """The device's activities (GPM) that rose by _BUSIER or more across the onset, as
    ("tensor activity 16% -> 22%", ...): more device work, which a host waiting on a full
    launch queue also shows as host time."""
    moved = _gpm_moves([g for g in gpu if lo <= g[0] < edge], [g for g in gpu if g[0] >= since])
    return tuple(f"{label} {b:.0%} -> {a:.0%}" for label, b, a in moved
                 if label != "DRAM bandwidth" and a - b >= _BUSIER)


def _retries(alloc, since: float) -> str:
    before = [a[1] for a in alloc if a[0] < since]
    after = [a[1] for a in alloc if a[0] >= since]
    if before and after and after[-1] > before[-1]:
        return f"allocator retries +{after[-1] - before[-1]}"
    return ""
