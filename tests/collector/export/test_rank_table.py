"""The scrape's RankTable against the rank states it reads, read a chunk at a time while ingest
goes on, and the label texts' cache (reconnects, GPU identities, a forked render's warm-up)."""

from __future__ import annotations

import random
import sys
import threading
import time

from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import apply, hello, step
from stepwatch.collector.export._exposition import render
from stepwatch.collector.export._metrics import RankMetrics
from stepwatch.collector.export._rank_table import RankTable
from stepwatch.collector.wire._sanitize import _repeated
from stepwatch.collector.state._state import CollectorState
from stepwatch.proto.stepwatch.v1 import agent_pb2

T0 = 1_700_000_000.0
KINDS = {"gpu_sample": agent_pb2.GpuSample, "allocator": agent_pb2.AllocatorSample, "host": agent_pb2.HostSample,
         "stats": agent_pb2.AgentStats}
# each kind's singular number fields (the stats' window_skips map aside)
SCALARS = {kind: [f for f in cls.DESCRIPTOR.fields if f.type != f.TYPE_MESSAGE and not _repeated(f)]
           for kind, cls in KINDS.items()}


def _sample(kind: str, draw_value) -> object:
    """A sample of ``kind`` with some fields unset, some set to 0 and some set to a value."""
    msg = KINDS[kind]()
    for field in SCALARS[kind]:
        choice = draw_value()
        if choice is None:
            continue
        setattr(msg, field.name, float(choice) if field.type == field.TYPE_DOUBLE else int(choice))
    return msg


@st.composite
def states(draw):
    state = CollectorState(60.0)
    n = draw(st.integers(1, 12))
    value = st.one_of(st.none(), st.just(0), st.integers(1, 10 ** 6))
    for r in range(n):
        job = f"j{draw(st.integers(0, 3))}"
        key = state.connect(hello(job=job, rank=r).hello, T0)
        batch = agent_pb2.Batch(seq=1)
        # (step times from a drawn seed: up to 150 steps of drawn floats per rank exceeded
        # Hypothesis's data budget now and then)
        rng = random.Random(draw(st.integers(0, 2 ** 32)))
        for i in range(draw(st.integers(0, 150))):
            batch.steps.append(step(i + 1, duration=rng.choice([0.0, 2.0, rng.uniform(0, 2)]),
                                    wait=rng.choice([0.0, 1.0, rng.uniform(0, 1)])))
        if draw(st.booleans()):
            batch.gpu_samples.append(_sample("gpu_sample", lambda: draw(value)))
        if draw(st.booleans()):
            batch.allocator.append(_sample("allocator", lambda: draw(value)))
        if draw(st.booleans()):
            batch.host.append(_sample("host", lambda: draw(value)))
        if draw(st.booleans()):
            batch.stats.CopyFrom(_sample("stats", lambda: draw(value)))
        for w in range(draw(st.integers(0, 3))):
            batch.windows.add(window_id=w, first_step=w * 10 + 1, last_step=w * 10 + 3, compute_s=0.1)
        apply(state, key, "s1", batch, T0)
        if draw(st.booleans()):
            state.disconnect(key, T0)
    return state


@settings(max_examples=60, deadline=None)
@given(states(), st.integers(1, 5))
def test_the_table_holds_what_each_rank_state_holds(state, chunk):
    table = RankTable(full=True)
    state.read_ranks(table.add, chunk=chunk)
    ranks = state.snapshot()
    assert [(t, r) for t, r in zip(table.job, table.rank)] == [(s.job, s.rank) for s in ranks]
    assert table.steps_total == [s.steps_total for s in ranks]
    assert table.step_counts == [tuple(s.step_hist.counts) for s in ranks]
    assert table.wait_sum == [s.wait_hist.sum for s in ranks]
    assert table.windows == [tuple(s.windows) for s in ranks]
    assert table.wait_ratio() == [s.dataloader_wait_ratio for s in ranks]
    assert table.recent_step_s() == [s.recent_step_s for s in ranks]
    assert table.streams == [s.streams for s in ranks]
    for kind, fields in SCALARS.items():
        for field in fields:
            expected = []
            for s in ranks:
                sample = getattr(s, kind)
                unset = sample is None or (field.has_presence and not sample.HasField(field.name))
                expected.append(None if unset else getattr(sample, field.name))
            assert table.raw(kind, field.name) == expected, (kind, field.name)
            assert table.field(kind, field.name) == [None if v is None else float(v) for v in expected]
    for job, a, b in table.jobs():
        assert set(table.job[a:b]) == {job} and table.job.count(job) == b - a


def test_steps_total_keeps_the_steps_of_evicted_sessions():
    state = CollectorState(60.0)
    for n in range(20):  # more sessions than kept (MAX_SESSIONS): a trainer restarting 20 times
        key = state.connect(hello(session=f"s{n}").hello, T0)
        apply(state, key, f"s{n}", agent_pb2.Batch(seq=1, steps=[step(1), step(2), step(3)]), T0)
        apply(state, key, f"s{n}", agent_pb2.Batch(seq=2, steps=[step(2)]), T0)  # not a new high
    (rank,) = state.snapshot()
    assert rank.steps_total == 60 and len(rank.sessions) < 20


def test_each_rank_is_consistent_in_itself_while_ingest_goes_on():
    """A histogram's count and buckets come from one hold of the lock (a scrape whose count and
    buckets disagreed would export a +Inf bucket that is not the count). Read without the lock,
    a few hundred of the reads here disagree."""
    state = CollectorState(60.0)
    keys = [state.connect(hello(rank=r).hello, T0) for r in range(64)]
    stop, rounds = threading.Event(), [0]

    def ingest():
        while not stop.is_set():
            rounds[0] += 1
            seq = rounds[0]
            for key in keys:
                apply(state, key, "s1", agent_pb2.Batch(seq=seq, steps=[step(seq, duration=0.01 * (seq % 7))]), T0)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can
    worker = threading.Thread(target=ingest)
    worker.start()
    started, disagree, reads = time.monotonic(), 0, 0
    try:
        while rounds[0] < 300 and time.monotonic() - started < 30:
            table = RankTable.read(state)
            reads += 1
            disagree += sum(sum(c) != n for c, n in zip(table.step_counts, table.step_count))
            disagree += sum(sum(c) != n for c, n in zip(table.wait_counts, table.wait_count))
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(old)
    assert rounds[0] >= 300 and reads > 100
    assert disagree == 0


def _rank_info(text: str) -> dict:
    return {s.labels["rank"]: s.labels for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "stepwatch_rank_info"}


def test_labels_follow_a_reconnect_and_a_gpu_identity():
    state = CollectorState(60.0)
    metrics = RankMetrics(state)
    state.connect(hello(rank=0, host="node-a").hello, T0)
    state.connect(hello(rank=1, gpu=None).hello, T0)  # a CPU rank
    first = _rank_info(render(metrics.families()))
    assert first["0"]["node"] == "node-a" and "UUID" not in first["1"]
    state.connect(hello(rank=0, host="node-b").hello, T0)  # rescheduled on another node
    key = ("j", 1)
    apply(state, key, "s1", agent_pb2.Batch(seq=1, gpu=agent_pb2.GpuIdentity(index=3, uuid="GPU-x")), T0)
    second = _rank_info(render(metrics.families()))
    assert second["0"]["node"] == "node-b"
    assert second["1"]["UUID"] == "GPU-x" and second["1"]["gpu"] == "3"


def test_warm_renders_every_label_text_before_a_fork():
    """A forked render's cache dies with it: warm() in the collector fills it first, so the
    child finds every rank's texts."""
    state = CollectorState(60.0)
    for r in range(300):
        state.connect(hello(job=f"j{r // 64}", rank=r % 64).hello, T0)
    metrics = RankMetrics(state)
    metrics.warm()
    assert len(metrics._labels) == 300
    held = dict(metrics._labels)
    body = render(metrics.families(frozen=True))
    assert metrics._labels == held  # nothing rendered anew
    assert len(_rank_info(body)) == 64


def test_the_label_cache_forgets_ranks_that_left():
    """With a render process only warm() fills the cache (the parent never renders): ranks
    that left must not pile up in it over a collector's life."""
    state = CollectorState(1.0)
    metrics = RankMetrics(state)
    for wave in range(4):  # four generations of 1,000 ranks, each gone before the next comes
        keys = [state.connect(hello(job=f"w{wave}", rank=r).hello, T0) for r in range(1000)]
        metrics.warm()
        assert len(metrics._labels) == 1000
        for key in keys:
            state.disconnect(key, T0)
        state.expire(T0 + 2.0)
    metrics.warm()
    assert metrics._labels == {}  # (no rank left)
