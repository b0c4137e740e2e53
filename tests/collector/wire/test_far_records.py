"""Absurd but finite values do not stick: a sample a day or more from the collector's clock
and a step numbered beyond any real job are refused and counted; the next real samples are
the latest (real gRPC against a collector on a fixed clock)."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import batch, hello, step
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc


def alloc(t, allocated):
    return agent_pb2.AllocatorSample(time_s=t, allocated_bytes=allocated, reserved_bytes=allocated,
                                     device_total_bytes=80 << 30)


def test_a_sample_at_1e12_and_a_step_at_2_63_are_refused_and_the_next_real_ones_count(start_collector):
    col = start_collector()
    now = col.clock.now
    msgs = [hello(job="far"),
            batch(1, steps=[step(1), step(2)], allocator=[alloc(now, 1 << 30)]),
            batch(2, steps=[step(3), step(2 ** 63)], allocator=[alloc(1e12, 2 << 30)],
                  host=[agent_pb2.HostSample(time_s=-5e9, cpu_seconds=1.0)]),
            batch(3, steps=[step(4)], allocator=[alloc(now + 1, 3 << 30)])]
    with col.channel() as chan:
        acks = list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(msgs), timeout=30))
    assert [a.ack.seq for a in acks] == [1, 2, 3]
    rank = json.loads(col.get("/api/jobs?job=far")[2])["jobs"][0]["ranks"][0]
    assert rank["steps_total"] == 4
    assert rank["allocator"]["allocated_bytes"] == 3 << 30  # the real sample after the absurd one
    assert rank["host_sample"] is None
    text = col.get("/metrics")[2].decode()
    far = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples
           if s.name == "stepwatch_collector_far_records_total"]
    assert far == [3.0]  # the step at 2^63, the allocator sample at 1e12, the host sample


def test_a_counter_at_2_63_is_cleared_and_counted_and_the_ranks_detection_goes_on(start_collector):
    """A GPU sample's memory counter at 2^63 and an allocator sample's at 2^63 + 5 (past the
    collector's int64 columns: the why's ring raised, and the rank's detection skipped every such
    batch): those fields are cleared and counted, the samples' other values and the batch's
    steps count."""
    col = start_collector()
    now = col.clock.now
    big = batch(2, steps=[step(3), step(4)],
                allocator=[agent_pb2.AllocatorSample(time_s=now, allocated_bytes=2 ** 63 + 5, reserved_bytes=2 << 30,
                                                     device_total_bytes=80 << 30)],
                gpu_samples=[agent_pb2.GpuSample(time_s=now, memory_used_bytes=2 ** 63, memory_total_bytes=80 << 30,
                                                 utilization_ratio=0.5)])
    msgs = [hello(job="big"), batch(1, steps=[step(1), step(2)]), big, batch(3, steps=[step(5)])]
    with col.channel() as chan:
        acks = list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(msgs), timeout=30))
    assert [a.ack.seq for a in acks] == [1, 2, 3]
    rank = json.loads(col.get("/api/jobs?job=big")[2])["jobs"][0]["ranks"][0]
    assert rank["steps_total"] == 5 and rank["gpu_sample"]["utilization_ratio"] == 0.5
    assert "memory_used_bytes" not in rank["gpu_sample"] or not rank["gpu_sample"]["memory_used_bytes"], rank
    assert rank["allocator"]["reserved_bytes"] == 2 << 30 and not rank["allocator"].get("allocated_bytes"), rank
    assert col.collector.detection.engine.last_step("big", 0) == 5
    text = col.get("/metrics")[2].decode()
    cleared = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "stepwatch_collector_out_of_range_fields_total"]
    assert cleared == [2.0], cleared
