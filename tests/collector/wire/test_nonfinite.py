"""Non-finite numbers never reach state, detection or /metrics: such records are dropped and
counted at ingest (real collector, real gRPC)."""

from __future__ import annotations

import math

from collector_testlib import batch, hello, step

from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

NAN, INF = float("nan"), float("inf")


def test_nan_and_inf_records_are_dropped_and_counted(start_collector):
    collector = start_collector(metrics_per_rank="full")
    bad = batch(1, steps=[step(1), step(2, duration=NAN), step(3, duration=INF)],
                allocator=[agent_pb2.AllocatorSample(time_s=NAN, allocated_bytes=1, reserved_bytes=2,
                                                     device_total_bytes=10)],
                host=[agent_pb2.HostSample(time_s=1.7e9, cpu_seconds=INF, resident_memory_bytes=1 << 30),
                      agent_pb2.HostSample(time_s=1.7e9 + 1, cpu_seconds=1.0, resident_memory_bytes=1 << 30)],
                windows=[agent_pb2.WindowSummary(window_id=1, first_step=1, last_step=3, gpu_busy_ratio=NAN)],
                stats=agent_pb2.AgentStats(overhead_ratio=NAN, windows=1))
    with collector.channel() as chan:
        acks = list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter([hello(), bad]), timeout=10))
    assert [a.ack.seq for a in acks] == [1]  # acked: nothing is resent forever
    text = collector.get("/metrics")[2].decode()
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert not [line for line in samples if line.endswith((" NaN", " +Inf", " -Inf"))]
    (st,) = collector.collector.state.snapshot()
    assert st.steps_total == 1 and st.allocator is None and st.host.cpu_seconds == 1.0 and not st.windows
    assert st.stats.windows == 1 and math.isfinite(st.stats.overhead_ratio)
    assert collector.collector.health.ingest.snapshot()["nonfinite_records"] == 5
    assert "stepwatch_collector_nonfinite_records_total 5.0\n" in text


def test_the_step_columns_finiteness_check_covers_every_float_of_a_step_record():
    """The pipeline skips the generic check of step records when their columns sum finite:
    that holds only while a step record's float fields are exactly the three columns."""
    from stepwatch.collector.wire._columns import step_columns
    from stepwatch.collector.wire._sanitize import _plan
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    floats, _, repeated, messages = _plan(agent_pb2.StepRecord.DESCRIPTOR)
    assert sorted(floats) == ["dataloader_wait_s", "duration_s", "end_time_s"] and not repeated and not messages
    for field in floats:
        batch = agent_pb2.Batch(steps=[agent_pb2.StepRecord(step=1, duration_s=0.1, end_time_s=5.0)])
        assert step_columns(batch).finite()
        setattr(batch.steps[0], field, float("nan"))
        assert not step_columns(batch).finite(), field


def test_step_columns_keep_optional_counts_apart_from_unset_ones():
    from stepwatch.collector.wire._columns import step_columns
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    def cols(*tokens):
        steps = [agent_pb2.StepRecord(step=i + 1) for i in range(len(tokens))]
        for s, t in zip(steps, tokens):
            if t is not None:
                s.tokens = t
        return step_columns(agent_pb2.Batch(steps=steps))

    assert cols(None, None).tokens is None and cols(None, None).samples is None
    assert cols(512, None, 0).tokens == [512, None, 0]
    assert cols(0, 0).tokens == [0, 0]            # explicit zeros: carried (a known count of 0)
    assert cols(None, 7, None).tokens == [None, 7, None]


def test_drop_nonfinite_reaches_nested_records_and_keeps_overflowing_finite_ones():
    """The check sums a repeated field's records in one pass: a NaN deep in a window's named
    times still drops that window, and finite values whose sum overflows are kept."""
    from stepwatch.collector.wire._sanitize import drop_nonfinite

    nested = agent_pb2.WindowSummary(window_id=2, first_step=1, last_step=3)
    nested.top_kernels.add(name="gemm", seconds=NAN, count=1)
    big = [agent_pb2.GpuSample(time_s=1.7e9, power_watts=1e308, energy_joules=1e308),
           agent_pb2.GpuSample(time_s=1.7e9 + 1, power_watts=1e308)]
    b = agent_pb2.Batch(seq=1, windows=[agent_pb2.WindowSummary(window_id=1, first_step=1, last_step=3), nested],
                        gpu_samples=big, host=[agent_pb2.HostSample(time_s=-INF)],
                        stats=agent_pb2.AgentStats(window_warmup_s=INF, windows=2))
    assert drop_nonfinite(b) == 2
    assert [w.window_id for w in b.windows] == [1] and len(b.gpu_samples) == 2 and not b.host
    assert b.stats.windows == 2 and b.stats.window_warmup_s == 0.0  # cleared
    assert drop_nonfinite(b) == 0


def _rare(part: str) -> dict:
    """A batch part other than steps and samples, with a non-finite number."""
    return {"windows": {"windows": [agent_pb2.WindowSummary(window_id=1, first_step=1, last_step=3, gpu_busy_ratio=NAN)]},
            "events": {"events": [agent_pb2.Event(time_s=INF, kind="checkpoint")]},
            "stats": {"stats": agent_pb2.AgentStats(overhead_ratio=NAN, windows=1)}}[part]


def test_a_batch_whose_steps_and_samples_were_checked_still_has_its_other_parts_checked():
    """The caller checked the steps and samples (as the pipeline does); drop_nonfinite's shortcut
    for the usual batch (nothing else in it) must not skip windows, events or stats (trace
    references carry no floats)."""
    from stepwatch.collector.wire._sanitize import drop_nonfinite

    checked = ("steps", "gpu_samples", "host", "allocator")
    usual = dict(steps=[agent_pb2.StepRecord(step=1, end_time_s=1.7e9, duration_s=0.1)],
                 host=[agent_pb2.HostSample(time_s=1.7e9, cpu_seconds=1.0)])
    assert drop_nonfinite(agent_pb2.Batch(seq=1, **usual), checked) == 0
    for part in ("windows", "events"):
        b = agent_pb2.Batch(seq=1, **usual, **_rare(part))
        assert drop_nonfinite(b, checked) == 1, part
        assert not getattr(b, part) and len(b.steps) == 1, part
    b = agent_pb2.Batch(seq=1, **usual, **_rare("stats"))
    assert drop_nonfinite(b, checked) == 0 and b.stats.overhead_ratio == 0.0 and b.stats.windows == 1
    # checked only in part: the rest is looked at even in a batch of nothing else
    b = agent_pb2.Batch(seq=1, **usual, allocator=[agent_pb2.AllocatorSample(time_s=NAN)])
    assert drop_nonfinite(b, ("steps", "gpu_samples", "host")) == 1 and not b.allocator


def test_the_usual_batch_shortcut_names_every_part_it_skips():
    """drop_nonfinite's shortcut looks at windows, events, traces, phase times and stats by name: every other
    record field it handles must be one of the usual ones the caller checks."""
    from stepwatch.collector.wire import _sanitize

    assert set(_sanitize._RECORDS) == _sanitize._USUAL | {"windows", "events", "traces", "phase_times"}
