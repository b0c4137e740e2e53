"""CollectorState: de-duplication, step accounting, bounded events, expiry with a fake clock."""

from __future__ import annotations

import math

from hypothesis import given, strategies as st

from collector_testlib import apply, hello, step
from stepwatch.collector.ingest._pipeline import Pipeline
from stepwatch.collector.state._state import STEP_BUCKETS, CollectorState, Histogram
from stepwatch.proto.stepwatch.v1 import agent_pb2

T0 = 1_700_000_000.0


def connected(grace: float = 60.0, session: str = "s1"):
    state = CollectorState(grace)
    key = state.connect(hello(session=session).hello, T0)
    return state, key


def only(state):
    (rank,) = state.snapshot()
    return rank


def test_duplicate_seq_is_not_applied():
    state, key = connected()
    b = agent_pb2.Batch(seq=1, steps=[step(1, samples=8)])
    assert apply(state, key, "s1", b, T0) == "applied"
    assert apply(state, key, "s1", b, T0) == "duplicate"
    assert apply(state, key, "s1", agent_pb2.Batch(seq=0, steps=[step(9)]), T0) == "duplicate"
    assert apply(state, key, "s1", agent_pb2.Batch(seq=1 << 40, steps=[step(10)]), T0) == "jump"
    rank = only(state)
    assert (rank.steps_total, rank.samples_total, rank.step_hist.count) == (1, 8, 1)


def test_the_pipeline_counts_what_ingest_saw():
    state = CollectorState(60.0)
    pipe = Pipeline(state, [])
    h = hello(session="s1").hello
    key = pipe.connect(h, T0)
    b = agent_pb2.Batch(seq=1, steps=[step(1)], stats=agent_pb2.AgentStats(records_dropped=3))
    assert pipe.batch(key, h, b, T0) and not pipe.batch(key, h, b, T0)
    assert not pipe.batch(key, h, agent_pb2.Batch(seq=1 << 40, steps=[step(2)]), T0)
    many = agent_pb2.WindowSummary(top_kernels=[agent_pb2.NamedTime(name=f"k{i}", seconds=i) for i in range(60)])
    assert pipe.batch(key, h, agent_pb2.Batch(seq=2, windows=[many], stats=agent_pb2.AgentStats(records_dropped=5)), T0)
    c = pipe.counters.snapshot()
    assert (c["streams_accepted"], c["batches_received"], c["batches_duplicate"], c["batches_seq_refused"]) == (1, 4, 1, 1)
    assert c["records_dropped"] == 5 and c["trimmed"]["window_names"] == 1
    (window,) = only(state).windows
    assert len(window.top_kernels) == 50 and window.top_kernels[0].name == "k59"  # the largest kept


def test_steps_total_is_max_step_and_sums_over_sessions():
    state, key = connected()
    apply(state, key, "s1", agent_pb2.Batch(seq=5, steps=[step(40), step(41)]), T0)
    assert only(state).steps_total == 41  # cumulative agent count, not number of records
    key2 = state.connect(hello(session="s2").hello, T0)  # trainer restarted: new session
    apply(state, key2, "s2", agent_pb2.Batch(seq=1, steps=[step(1), step(2)]), T0)
    assert only(state).steps_total == 43


def test_tokens_unknown_until_seen_and_wait_ratio():
    state, key = connected()
    apply(state, key, "s1", agent_pb2.Batch(seq=1, steps=[step(1, duration=1.0, wait=0.25)]), T0)
    rank = only(state)
    assert not rank.tokens_known and not rank.samples_known
    assert rank.dataloader_wait_ratio == 0.25
    steps = [step(i, duration=0.1, wait=0.0, tokens=10) for i in range(2, 120)]
    apply(state, key, "s1", agent_pb2.Batch(seq=2, steps=steps), T0)
    rank = only(state)
    assert rank.tokens_known and rank.tokens_total == 1180
    assert rank.dataloader_wait_ratio == 0.0  # the old slow step fell out of the last-100 window


def test_events_bounded_to_32_kinds_and_last_50():
    state, key = connected()
    events = [agent_pb2.Event(time_s=T0 + i, kind=f"k{i}") for i in range(40)] + \
             [agent_pb2.Event(time_s=T0 + 100 + i, kind="k0") for i in range(20)]
    apply(state, key, "s1", agent_pb2.Batch(seq=1, events=events), T0)
    rank = only(state)
    assert len(rank.event_counts) == 33 and rank.event_counts["other"] == 8 and rank.event_counts["k0"] == 21
    assert len(rank.events) == 50 and rank.events[-1].time_s == T0 + 119


def test_latest_sample_wins_by_time_and_the_latest_stats_are_kept():
    state, key = connected()
    new, old = agent_pb2.HostSample(time_s=T0 + 10, threads=9), agent_pb2.HostSample(time_s=T0 + 5, threads=1)
    apply(state, key, "s1", agent_pb2.Batch(seq=1, host=[new], stats=agent_pb2.AgentStats(records_dropped=3)), T0)
    apply(state, key, "s1", agent_pb2.Batch(seq=2, host=[old], stats=agent_pb2.AgentStats(records_dropped=5)), T0)
    assert only(state).host.threads == 9
    assert only(state).stats.records_dropped == 5


def test_expiry_after_grace_with_injected_clock():
    state, key = connected(grace=60.0)
    apply(state, key, "s1", agent_pb2.Batch(seq=1, steps=[step(1)]), T0)
    assert state.expire(T0 + 10_000) == []  # connected ranks never expire
    state.disconnect(key, T0 + 100)
    assert not only(state).connected and state.connected_agents() == 0
    assert state.expire(T0 + 160) == []  # exactly at the grace period: still kept
    assert state.expire(T0 + 160.5) == [("j", 0)]
    assert state.snapshot() == []


def test_a_rank_that_only_said_hello_is_forgotten_when_its_stream_ends():
    """No Batch ever came: it holds no job slot past its stream (no grace period)."""
    state, key = connected(grace=60.0)
    state.disconnect(key, T0 + 100)
    assert state.expire(T0 + 100.5) == [("j", 0)] and state.snapshot() == []


def test_reconnect_within_grace_cancels_expiry_and_two_streams_count_once():
    state, key = connected(grace=60.0)
    state.connect(hello().hello, T0 + 1)  # a second stream for the same rank
    state.disconnect(key, T0 + 2)
    assert only(state).connected  # one stream still alive
    state.disconnect(key, T0 + 3)
    state.connect(hello().hello, T0 + 50)
    assert state.expire(T0 + 1000) == [] and only(state).connected


def test_snapshot_is_a_copy():
    state, key = connected()
    snap = only(state)
    apply(state, key, "s1", agent_pb2.Batch(seq=1, steps=[step(1)]), T0)
    assert snap.step_hist.count == 0 and only(state).step_hist.count == 1


@given(st.lists(st.floats(max_value=1e9) | st.sampled_from([math.nan, math.inf, -math.inf]), max_size=50))
def test_histogram_is_consistent(values):
    h, batch = Histogram(STEP_BUCKETS), Histogram(STEP_BUCKETS)
    for v in values:
        h.observe(v)
    batch.observe_many(values)
    assert (batch.counts, batch.count) == (h.counts, h.count)
    good = [v for v in values if math.isfinite(v) and v >= 0]
    cum = h.cumulative()
    assert cum[-1] == ("+Inf", len(good)) == ("+Inf", h.count)
    assert all(a[1] <= b[1] for a, b in zip(cum, cum[1:]))
    assert math.isclose(h.sum, math.fsum(good), rel_tol=1e-9, abs_tol=1e-6)


@given(st.lists(st.sampled_from(STEP_BUCKETS) | st.floats(min_value=0, max_value=100), min_size=1, max_size=40))
def test_histogram_batch_counts_each_value_in_its_bucket(values):
    """A batch of usable values (counted bucket range by bucket range) lands where each value,
    bisected on its own, would: values on a bound included (a bound is its bucket's upper end)."""
    h = Histogram(STEP_BUCKETS)
    h.observe_many(values)
    expected = [0] * (len(STEP_BUCKETS) + 1)
    for v in values:
        expected[sum(1 for b in STEP_BUCKETS if b < v)] += 1
    assert h.counts == expected and h.count == len(values)


@given(st.lists(st.lists(st.floats(min_value=0, max_value=1e4), max_size=20), max_size=8))
def test_merged_histogram_is_the_ranks_added_one_by_one(per_rank):
    """A job's histogram (Histogram.merged over its ranks') is the histogram of all their values."""
    hists = []
    for values in per_rank:
        h = Histogram(STEP_BUCKETS)
        h.observe_many(values)
        hists.append(h)
    every = Histogram(STEP_BUCKETS)  # all the ranks' values in one histogram
    every.observe_many([v for values in per_rank for v in values])
    merged = Histogram.merged(STEP_BUCKETS, [h.counts for h in hists], [h.sum for h in hists],
                              [h.count for h in hists])
    assert (merged.counts, merged.count) == (every.counts, every.count)
    assert math.isclose(merged.sum, every.sum, rel_tol=1e-9, abs_tol=1e-9)


_KEPT_PARTS = r"""
import os
from stepwatch.collector.ingest._pipeline import Pipeline
from stepwatch.collector.state._state import CollectorState
from stepwatch.collector.alerting import Detection
from stepwatch.collector.detect import DetectionConfig
from stepwatch.proto.stepwatch.v1 import agent_pb2

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

b = agent_pb2.Batch(seq=1)
for i in range(1, 21):
    b.steps.add(step=i, end_time_s=1.7e9 + i, duration_s=0.1, dataloader_wait_s=0.001)
b.gpu_samples.add(time_s=1.7e9, sm_clock_hertz=1.9e9)
b.host.add(time_s=1.7e9, cpu_seconds=1.0)
b.allocator.add(time_s=1.7e9, allocated_bytes=1)
b.events.add(time_s=1.7e9, kind="k", message="m")
b.stats.records_dropped = 0
b.gpu.index = 0
b.traces.add(request_id="r", path="/tmp/t")
b.windows.add(window_id=1, first_step=1, last_step=3, start_time_s=1.7e9)
plain = b.SerializeToString()
# 50 KB in an unknown field (number 999, length-delimited): it lives in the parsed batch's
# memory, which nothing should keep once the batch is applied
pad = 50_000
padded = plain + bytes([0xBA, 0x3E]) + bytes([0x80 | (pad & 0x7F), 0x80 | ((pad >> 7) & 0x7F), pad >> 14]) + b"x" * pad
per_rank, pipes = [], []  # (both pipelines kept until both are measured)
for data in (plain, padded):
    pipe = Pipeline(CollectorState(300.0), [Detection(DetectionConfig(), log_changes=False)])
    hellos = [agent_pb2.Hello(job=f"j{r // 64}", rank=r % 64, session_id=f"s{r}") for r in range(1000)]
    keys = [pipe.connect(h, 0.0) for h in hellos]
    start = rss()
    for key, h in zip(keys, hellos):
        pipe.batch(key, h, agent_pb2.Batch.FromString(data), 1.7e9)
    per_rank.append((rss() - start) // len(hellos))
    pipes.append(pipe)
print(*per_rank)
"""


def test_kept_parts_of_a_batch_do_not_keep_the_batch():
    """The state and the diagnosis evidence keep a batch's window, event, stats, GPU identity,
    trace references and latest samples as copies: parsed messages share one arena, so a kept
    part kept the whole batch alive for every rank. A batch padded with 50 KB nobody keeps
    costs each rank about what the plain one does (resident memory per rank, in a fresh
    interpreter; the parts kept as they came: about 50 KB more)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _KEPT_PARTS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plain, padded = map(int, out.stdout.split())
    assert padded - plain < 10_000, (plain, padded)
