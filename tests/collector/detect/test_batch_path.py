"""The batch path (a batch's steps as columns) gives what feeding step by step gives: the
same conditions after every batch, the same pauses and counts, the same rings. Random jobs
with pauses, shifts, profiled and marked steps, tokens, warm-up, non-finite and non-positive
durations; batches of random sizes."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from stepwatch.collector._ring import Ring
from stepwatch.collector.detect import DetectionConfig, DetectionEngine, Steps
from stepwatch.collector.detect._memory_rule import MemoryRule
from stepwatch.collector.detect._throttle_rule import ThrottleRule
from stepwatch.collector.detect._config import DriftConfig, StragglerConfig
from stepwatch.collector.detect._drift import DriftDetector
from stepwatch.collector.detect._straggler import StragglerDetector


@settings(max_examples=200, deadline=None)
@given(types=st.sampled_from(["d", "Qdd", "qd"]), maxlen=st.integers(1, 12),
       chunks=st.lists(st.integers(0, 30), max_size=12), tail=st.integers(0, 15))
def test_ring_extend_columns_and_tail_match_rows_appended_one_by_one(types, maxlen, chunks, tail):
    by_rows, by_columns, value = Ring(types, maxlen), Ring(types, maxlen), 0
    for k in chunks:
        rows = [tuple(value + i + c for c in range(len(types))) for i in range(k)]
        value += k
        for row in rows:
            by_rows.append(*row)
        by_columns.extend_columns(*([row[c] for row in rows] for c in range(len(types))))
        assert list(by_columns) == list(by_rows)
        for c in range(len(types)):
            want = [row[c] for row in by_rows][-tail:] if tail else []
            assert by_columns.tail(c, tail) == want


@settings(max_examples=200, deadline=None)
@given(maxlen=st.integers(1, 12), data=st.data(),
       chunks=st.lists(st.integers(0, 30), max_size=12))
def test_nullable_ring_extend_columns_matches_rows_appended_one_by_one(maxlen, data, chunks):
    """A nullable ring (the diagnosis evidence's GPU samples: absent fields are None) filled a
    batch of columns at a time holds what rows appended one by one give, Nones included."""
    by_rows, by_columns, value = Ring("dqd", maxlen, nullable=True), Ring("dqd", maxlen, nullable=True), 0
    for k in chunks:
        rows = [tuple(None if data.draw(st.booleans()) else float(value + i) if t == "d" else value + i
                      for t in "dqd") for i in range(k)]
        value += k
        for row in rows:
            by_rows.append(*row)
        by_columns.extend_columns(*([row[c] for row in rows] for c in range(3)))
        assert list(by_columns) == list(by_rows)


def _job(seed: int, n: int) -> list:
    """(step, time, seconds) of a job with noise, pauses, a shift, bad values."""
    rng = random.Random(seed)
    out, t, level = [], 1.7e9, 0.02
    for step in range(1, n + 1):
        if step == n // 2:
            level *= rng.choice([1.0, 1.04, 1.08, 1.3])
        value = level * math.exp(rng.gauss(0, 0.03))
        roll = rng.random()
        if roll < 0.01:
            value *= rng.choice([3.0, 20.0])       # an evaluation pause, a stall
        elif roll < 0.012:
            value = rng.choice([0.0, -1.0, math.nan, math.inf])
        if 0.6 * n < step < 0.6 * n + 120 and seed % 3 == 0:
            value = level * 1.7                     # a long run of slow steps (a level change)
        t += value if math.isfinite(value) and value > 0 else level
        out.append((step, t, value))
    return out


def _batches(rows: list, rng: random.Random) -> list:
    out, i = [], 0
    while i < len(rows):
        k = rng.choice([1, 3, 10, 20, 37])
        out.append(rows[i:i + k])
        i += k
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_drift_feed_many_matches_feed(seed):
    # (60 s of 20 ms steps: horizons of seconds, so the job is judged and raises)
    cfg = DriftConfig(bucket_s=0.3, warmup_s=2, settle_s=5, critical_window_s=1, warning_window_s=2,
                      info_window_s=4, clear_s=1, z=3)
    one, many = DriftDetector(cfg, "j", 0), DriftDetector(cfg, "j", 0)
    rows = _job(seed, 3000)
    for batch in _batches(rows, random.Random(seed)):
        for step, t, v in batch:
            one.feed(step, t, v)
        many.feed_many([r[0] for r in batch], [r[1] for r in batch], [r[2] for r in batch])
        assert many.condition == one.condition
    assert many.pauses == one.pauses
    assert list(many._history) == list(one._history)
    assert many._steps._bucket == one._steps._bucket and many.baseline_s == one.baseline_s


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), ranks=st.integers(2, 9))
def test_straggler_feed_many_matches_feed(seed, ranks):
    cfg = StragglerConfig()
    one, many = StragglerDetector(cfg, "j"), StragglerDetector(cfg, "j")
    rng = random.Random(seed)
    slow = rng.randrange(ranks)
    jobs = {r: [(s, t, v * (1.5 if r == slow and s > 200 else 1.0)) for s, t, v in _job(seed + r, 600)]
            for r in range(ranks)}
    if seed % 2:  # step numbers with a gap and a restart from an earlier step (a checkpoint)
        jobs = {r: [(s + 7 * (s > 150) - 40 * (s > 400) - 3 * (s > 500), t, v) for s, t, v in rows] for r, rows in jobs.items()}
    # data-loader waits, some negative (clock skew) or not finite
    waits = {r: [0.001 * v * rng.choice([1, 1, 1, -1]) if rng.random() > 0.005 else math.nan
                 for _, _, v in jobs[r]] for r in range(ranks)}
    jobs = {r: [row + (w,) for row, w in zip(jobs[r], waits[r])] for r in range(ranks)}
    batches = {r: _batches(jobs[r], random.Random(seed * 31 + r)) for r in range(ranks)}
    while any(batches.values()):
        r = rng.choice([r for r in range(ranks) if batches[r]])
        batch = batches[r].pop(0)
        for step, t, v, w in batch:
            one.feed(r, step, t, v, w)
        many.feed_many(r, *([x[c] for x in batch] for c in range(4)))
        assert many.conditions == one.conditions
    assert many._cur == one._cur and many._blocks == one._blocks


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_engine_steps_matches_step(seed):
    """Batches of random sizes against one step at a time (``step``): the bookkeeping across
    batch boundaries (warm-up, marked phases, profiled steps, tokens, liveness)."""
    cfg = DetectionConfig(warmup_steps=37)
    one, many = DetectionEngine(cfg), DetectionEngine(cfg)
    rng = random.Random(seed)
    phases = ["", "", "", "eval", "checkpoint"]
    for rank in range(3):
        rows = _job(seed + rank, 1500)
        extra = [(rng.random() < 0.02, rng.choice(phases) if rng.random() < 0.05 else "",
                  rng.choice([None, 512, 1024]) if seed % 2 else None) for _ in rows]
        rows = [r + e for r, e in zip(rows, extra)]
        for batch in _batches(rows, random.Random(seed + 7 * rank)):
            for step, t, v, profiled, phase, tokens in batch:
                one.step("j", rank, step, t, v, tokens, 0.0, profiled=profiled, phase=phase)
            tokens = [b[5] for b in batch]
            many.feed("j", rank, Steps([b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch],
                                       [0.0] * len(batch), tokens if any(x is not None for x in tokens) else None),
                      profiled=tuple(i for i, b in enumerate(batch) if b[3]),
                      marks={i: b[4] for i, b in enumerate(batch) if b[4]} or None)
            assert sorted(map(repr, many.conditions())) == sorted(map(repr, one.conditions()))
        a, b = one._rank("j", rank), many._rank("j", rank)
        assert (a.seen, a.profiled, a.marked, a.last_phase) == (b.seen, b.profiled, b.marked, b.last_phase)
        assert one.drift._ranks[("j", rank)].ref_tokens == many.drift._ranks[("j", rank)].ref_tokens
        assert (a.live.last_step, a.live.last_time, list(a.live._recent)) == \
            (b.live.last_step, b.live.last_time, list(b.live._recent))
        da, db = one.drift_of("j", rank), many.drift_of("j", rank)
        assert da.pauses == db.pauses and all(list(x._history) == list(y._history) for x, y in ((da.median, db.median), (da.floor, db.floor)))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=60),
       maxlen=st.integers(1, 25), center=st.one_of(st.none(), st.floats(-6, 6, allow_nan=False)))
def test_sorted_window_median_and_mad_equal_the_direct_computation(values, maxlen, center):
    from stepwatch.collector.detect._types import SortedWindow, median

    window = SortedWindow(maxlen)
    for i, v in enumerate(values):
        window.append(v)
        kept = values[max(0, i + 1 - maxlen):i + 1]
        assert len(window) == len(kept) and window.median() == median(kept)
        c = window.median() if center is None else center
        assert window.mad(c) == median(abs(x - c) for x in kept)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(0, 5, allow_nan=False) | st.sampled_from([0.5, 1.0, 2.0]), min_size=2, max_size=40))
def test_leave_one_out_medians_and_mads_equal_the_direct_computation(values):
    """Every value's leave-one-out median and MAD around it, as the straggler judge uses them,
    equal the median of the others and of their deviations computed directly (ties included)."""
    from stepwatch.collector.detect._types import mads_without_each, median, medians_without_each

    others = [values[:i] + values[i + 1:] for i in range(len(values))]
    centers = medians_without_each(values)
    assert centers == [median(o) for o in others]
    assert mads_without_each(values, centers) == [median(abs(x - c) for x in o) for o, c in zip(others, centers)]


def test_straggler_feed_many_matches_feed_when_a_batch_restarts_inside_an_open_block():
    """A rank restarted from a checkpoint a few steps back: its next batch is consecutive but
    begins inside the block still open; the block closes when full, as step by step."""
    cfg = StragglerConfig()
    one, many = StragglerDetector(cfg, "j"), StragglerDetector(cfg, "j")
    for first, last in ((1, 7), (5, 14), (12, 40), (33, 61)):
        for r in range(3):
            rows = [(s, 1.7e9 + s, 0.02 * (1 + r) + 0.001 * s, 0.001 * (s % 4)) for s in range(first, last + 1)]
            for row in rows:
                one.feed(r, *row)
            many.feed_many(r, *([x[c] for x in rows] for c in range(4)))
            assert (many._cur, many._blocks, many.conditions) == (one._cur, one._blocks, one.conditions)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_engine_gpus_matches_the_rule_sample_by_sample(seed):
    """A batch of GPU samples without any throttling held or seen keeps only its last sample;
    the result must be what judging every sample in order gives (throttle_condition per sample,
    the memory detector's latest sample), for batches that start, hold and end throttling."""
    from stepwatch.collector.detect import GpuPoint
    from stepwatch.collector.detect._liveness import throttle_condition

    rng = random.Random(seed)
    cfg = DetectionConfig()
    engine = DetectionEngine(cfg)
    held, t = None, 1.7e9
    for _ in range(rng.randint(1, 12)):
        points = []
        for _ in range(rng.randint(0, 6)):
            t += 1.0
            reasons = rng.choice([None, 0, 0, 0, 1, 4, 8, 32, 64, 128])  # masked and unmasked bits
            points.append(GpuPoint(t, rng.choice([None, 1 << 30]), 80 << 30, reasons,
                                   rng.choice([None, 1.2e9]), rng.choice([None, 60.0])))
        if points:
            engine.feed("j", 0, gpu=_Table(points))
        for p in points:  # the rule, sample by sample
            held = throttle_condition(cfg.gpu, "j", 0, p, held, None)
        assert engine.rule(ThrottleRule)._held.get(("j", 0)) == held
        assert [c for c in engine.conditions() if c.alertname == "StepwatchGpuThrottled"] == ([held] if held else [])
        if points:
            assert engine.rule(MemoryRule)._ranks[("j", 0)]._gpu == points[-1]


def _memory_samples(rng: random.Random, n: int) -> list:
    """(allocator point, GPU point, host point, host available bytes or None) per second: a
    leak or a breathing allocator, fragmentation episodes, retry and OOM increments, reserved
    memory at zero, GPU fullness from NVML or not, a growing host."""
    from stepwatch.collector.detect import AllocatorPoint, GpuPoint, HostPoint

    gib, t, retries, ooms = 2**30, 1.7e9, 0, 0
    leak = rng.choice([0.0, 0.0, 2e6, 4e7])
    out, frag = [], False
    for i in range(n):
        t += rng.choice([1.0, 1.0, 1.0, 0.5, 7.0, 30.0])
        if rng.random() < 0.02:
            frag = not frag
        retries += rng.random() < 0.01
        ooms += rng.random() < 0.003
        reserved = 0 if rng.random() < 0.01 else int(rng.choice([50, 74, 78]) * gib)
        allocated = int(30 * gib + leak * i + rng.random() * gib)
        split = int(reserved * (rng.choice([0.3, 0.21, 0.4]) if frag else rng.random() * 0.1))
        alloc = AllocatorPoint(t, allocated, reserved, split, retries, ooms, 80 * gib)
        gpu = GpuPoint(t, rng.choice([None, 70 * gib, 79 * gib]), 80 * gib, rng.choice([0, 0, 4, None]),
                       1.4e9, 60.0)
        host = HostPoint(t, int(4 * gib + leak * i))
        out.append((alloc, gpu, host, rng.choice([None, 100 * gib])))
    return out


class _Table:
    """A SampleTable of rows (points, or tuples with ``names``), as the collector's Samples
    reads them: None stands for an unset field (read as 0 unless asked for as optional), as
    does a field the rows do not have."""

    def __init__(self, rows: list, names: tuple = ()):
        names = names or rows[0]._fields
        self._cols = {"time_s" if n == "time" else n: [r[i] for r in rows] for i, n in enumerate(names)}

    def __len__(self) -> int:
        return len(self._cols["time_s"])

    def __getitem__(self, name: str) -> list:
        return [0 if v is None else v for v in self._cols.get(name, [None] * len(self))]

    def optional(self, name: str) -> list:
        return list(self._cols.get(name, [None] * len(self)))  # (a field no row has: unset)

    def last(self, name: str, optional: bool = False):
        return (self.optional(name) if optional else self[name])[-1]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_engine_memory_columns_match_the_samples_one_by_one(seed):
    """A batch of allocator, NVML and host samples as columns (the collector's path: points
    only of what the leak trend keeps and the last sample, unless something is held or moved)
    against each sample fed in order to a memory detector of its own: the same conditions, the
    same detector state."""
    from stepwatch.collector.detect._config import MemoryConfig
    from stepwatch.collector.detect._memory import MemoryDetector

    cfg = DetectionConfig(memory=MemoryConfig(leak_window_s=240.0))
    a, many = MemoryDetector(cfg.memory, "j", 0), DetectionEngine(cfg)
    rng = random.Random(seed)
    rows = _memory_samples(rng, 900)
    i = 0
    while i < len(rows):
        batch = rows[i:i + rng.choice([1, 2, 5, 5, 8, 20])]
        i += len(batch)
        for alloc, gpu, host, available in batch:
            a.allocator(alloc)
        for alloc, gpu, host, available in batch:
            a.gpu(gpu)
        for alloc, gpu, host, available in batch:
            a.host(host, available)
        many.feed("j", 0, allocator=_Table([b[0] for b in batch]), gpu=_Table([b[1] for b in batch]),
                  host=_Table([(b[2].time, b[2].resident_memory_bytes, b[3]) for b in batch],
                              ("time", "resident_memory_bytes", "host_memory_available_bytes")))
        assert sorted(map(repr, many.conditions())) == sorted(map(repr, a.conditions.values()))
        b = many.rule(MemoryRule)._ranks[("j", 0)]
        assert (a._alloc, a._gpu, a._until) == (b._alloc, b._gpu, b._until)
        assert [list(t._pts) for t in a._gpu_trend.trends] == [list(t._pts) for t in b._gpu_trend.trends]
        assert [list(t._pts) for t in a._host_trend.trends] == [list(t._pts) for t in b._host_trend.trends]
