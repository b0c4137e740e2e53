"""A real grpc.aio collector on 127.0.0.1:0 with a real gRPC client and real HTTP scrapes."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Optional

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import batch, hello, step
from stepwatch.collector.ingest._record import read_record
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

CONNECT = "/stepwatch.v1.AgentService/Connect"


def converse(chan, messages, metadata=None) -> list[agent_pb2.Command]:
    """Send ``messages`` on one stream, half-close, and return every Command received."""
    stub = agent_pb2_grpc.AgentServiceStub(chan)
    return list(stub.Connect(iter(messages), metadata=metadata, timeout=10))


def rich_batch(seq: int) -> agent_pb2.AgentMessage:
    return batch(
        seq, steps=[step(1, duration=0.030, samples=8, tokens=8192), step(2, duration=0.040, wait=0.004, samples=8, tokens=8192)],
        allocator=[agent_pb2.AllocatorSample(time_s=1.7e9, device=0, allocated_bytes=1000, reserved_bytes=4000,
                                             active_bytes=1200, inactive_split_bytes=300, alloc_retries=2, ooms=0,
                                             device_total_bytes=141 << 30)],
        gpu_samples=[agent_pb2.GpuSample(time_s=1.7e9, utilization_ratio=0.93, power_watts=512.5,
                                         energy_joules=1e6, clock_event_reasons=0x4 | 0x20, ecc_uncorrected_errors=0,
                                         sm_active_ratio=0.807, sm_occupancy_ratio=0.119, tensor_active_ratio=0.783,
                                         tensor_hmma_active_ratio=0.78, dram_active_ratio=0.144,
                                         pcie_tx_bytes_per_second=2.5e8, nvlink_rx_bytes_per_second=3e11)],
        host=[agent_pb2.HostSample(time_s=1.7e9, cpu_seconds=12.5, resident_memory_bytes=2 << 30, threads=40, children=4)],
        events=[agent_pb2.Event(time_s=1.7e9, kind="hook_error", message="boom")],
        stats=agent_pb2.AgentStats(records_dropped=7, hook_errors=1, spool_bytes=2048))


def sample_value(text: str, name: str, labels: Optional[dict] = None) -> float:
    """Value of the sample ``name`` with exactly ``labels``, parsed from a scrape."""
    found = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples
             if s.name == name and s.labels == (labels or {})]
    assert len(found) == 1, (name, labels, found)
    return found[0]


RANK = {"training_job": "j", "rank": "0", "local_rank": "0", "node": "node-a"}
GPU = {**RANK, "gpu": "0", "UUID": "GPU-0", "modelName": "NVIDIA H200"}


def test_acks_dedup_and_metrics(start_collector):
    collector = start_collector(metrics_per_rank="full")
    with collector.channel() as chan:
        acks = converse(chan, [hello(), rich_batch(1), rich_batch(1), batch(2, steps=[step(3)])])
    assert [c.ack.seq for c in acks] == [1, 1, 2]
    status, ctype, body = collector.get("/metrics")
    text = body.decode()
    assert status == 200 and ctype == CONTENT_TYPE_LATEST
    assert sample_value(text, "stepwatch_steps_total", RANK) == 3
    assert sample_value(text, "stepwatch_samples_total", RANK) == 16  # duplicate not applied
    assert sample_value(text, "stepwatch_tokens_total", RANK) == 16384
    assert sample_value(text, "stepwatch_step_duration_seconds_bucket", {**RANK, "le": "0.05"}) == 3
    assert sample_value(text, "stepwatch_step_duration_seconds_count", RANK) == 3
    assert sample_value(text, "stepwatch_allocator_inactive_split_bytes", RANK) == 300
    assert sample_value(text, "stepwatch_allocator_alloc_retries_total", RANK) == 2
    assert sample_value(text, "stepwatch_gpu_utilization_ratio", GPU) == 0.93
    assert sample_value(text, "stepwatch_gpu_sm_active_ratio", GPU) == 0.807  # GPM
    assert sample_value(text, "stepwatch_gpu_tensor_active_ratio", GPU) == 0.783
    assert sample_value(text, "stepwatch_gpu_nvlink_rx_bytes_per_second", GPU) == 3e11
    assert "stepwatch_gpu_fp64_active_ratio" not in text  # not reported: no series
    assert sample_value(text, "stepwatch_gpu_energy_joules_total", GPU) == 1e6
    assert sample_value(text, "stepwatch_gpu_clock_event_active", {**GPU, "reason": "sw_thermal_slowdown"}) == 1
    assert sample_value(text, "stepwatch_gpu_clock_event_active", {**GPU, "reason": "hw_slowdown"}) == 0
    assert sample_value(text, "stepwatch_gpu_ecc_errors_total", {**GPU, "type": "uncorrected"}) == 0
    assert "stepwatch_gpu_temperature_celsius" not in text  # no sample source, no metric
    assert sample_value(text, "stepwatch_process_threads", RANK) == 40
    assert "stepwatch_process_io_read_bytes_total" not in text
    assert sample_value(text, "stepwatch_agent_events_total", {**RANK, "kind": "hook_error"}) == 1
    assert sample_value(text, "stepwatch_agent_connected", RANK) == 0  # stream ended
    assert 'agent_version="0.1.0"' in text and 'torch_version="2.11.0"' in text
    assert sample_value(text, "stepwatch_collector_batches_received_total") == 3
    assert sample_value(text, "stepwatch_collector_batches_duplicate_total") == 1
    assert sample_value(text, "stepwatch_collector_records_dropped_total") == 7
    labels = {k for fam in text_string_to_metric_families(text) for smp in fam.samples for k in smp.labels}
    assert not labels & {"job", "instance", "step"}


def test_connected_while_stream_lives(collector):
    import queue
    q: "queue.Queue" = queue.Queue()
    q.put(hello(rank=3))
    with collector.channel() as chan:
        replies = agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(q.get, None), timeout=10)
        q.put(batch(1, steps=[step(1)]))
        assert next(replies).ack.seq == 1
        assert collector.collector.state.connected_agents() == 1
        assert sample_value(collector.get("/metrics")[2].decode(), "stepwatch_collector_connected_agents") == 1
        q.put(None)
        assert list(replies) == []
    jobs = json.loads(collector.get("/api/jobs")[2])
    (rank,) = jobs["jobs"][0]["ranks"]
    assert jobs["jobs"][0]["job"] == "j" and rank["rank"] == 3 and rank["steps_total"] == 1
    assert rank["connected"] is False and rank["gpu"]["uuid"] == "GPU-3"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_is_clean(start_collector):
    collector = start_collector(metrics_per_rank="full")
    with collector.channel() as chan:
        converse(chan, [hello(), rich_batch(1)])
    body = collector.get("/metrics")[2]
    # The dcgm-exporter label `modelName` (kept on purpose, ARCHITECTURE.md) is the one thing
    # promtool's camelCase lint objects to; with it renamed the scrape must be spotless.
    proc = subprocess.run(["promtool", "check", "metrics"], input=body.replace(b"modelName=", b"model_name="),
                          capture_output=True, timeout=30)
    assert proc.stdout + proc.stderr == b"" and proc.returncode == 0
    proc = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
    findings = set((proc.stdout + proc.stderr).decode().splitlines())
    assert all(f.startswith(("stepwatch_gpu_", "stepwatch_rank_info")) and f.endswith("label names should be written in 'snake_case' not "
                                                               "'camelCase'") for f in findings), findings


def test_malformed_bytes_are_invalid_argument(collector):
    with collector.channel() as chan:
        connect = chan.stream_stream(CONNECT, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as err:
            list(connect(iter([b"\xff\xff\xff\xff"]), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("malformed AgentMessage: ")
    text = collector.get("/metrics")[2].decode()
    assert sample_value(text, "stepwatch_collector_decode_errors_total") == 1
    assert sample_value(text, "stepwatch_collector_streams_rejected_total", {"reason": "malformed"}) == 1


@pytest.mark.parametrize("first,reason,detail", [
    (batch(1), "no_hello", "the first AgentMessage must carry a Hello"),
    (hello(job=""), "invalid_hello", "Hello.job must not be empty"),
    (hello(rank=-1), "invalid_hello", "Hello.rank must be >= 0"),
])
def test_first_message_must_be_valid_hello(collector, first, reason, detail):
    with collector.channel() as chan, pytest.raises(grpc.RpcError) as err:
        converse(chan, [first, batch(2)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and detail in err.value.details()
    assert collector.collector.health.ingest.snapshot()["streams_rejected"][reason] == 1


def test_auth_token(start_collector):
    running = start_collector(auth_token="s3cret")
    with running.channel() as chan:
        for metadata in (None, (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as err:
                converse(chan, [hello(), batch(1)], metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert err.value.details() == "stepwatch: wrong or missing auth token"
        acks = converse(chan, [hello(), batch(1)], metadata=(("authorization", "Bearer s3cret"),))
    assert [a.ack.seq for a in acks] == [1]
    assert running.collector.health.ingest.snapshot()["streams_rejected"]["unauthenticated"] == 2


def test_oversized_messages_are_refused_and_counted(start_collector):
    """Over max_message_bytes: refused as malformed and counted (the agent moves such a batch
    aside); over twice that, gRPC refuses it before the collector sees it (not counted)."""
    running = start_collector(max_message_bytes=4096)
    for size, code in ((6000, grpc.StatusCode.INVALID_ARGUMENT), (9000, grpc.StatusCode.RESOURCE_EXHAUSTED)):
        big = batch(1, events=[agent_pb2.Event(kind="x", message="m" * size)])
        with running.channel() as chan, pytest.raises(grpc.RpcError) as err:
            converse(chan, [hello(), big])
        assert err.value.code() == code, (size, err.value.details())
    assert "over max_message_bytes 4096" in converse_error(running, 6000)
    assert running.collector.health.ingest.snapshot()["streams_rejected"]["oversize"] == 2


def converse_error(running, size: int) -> str:
    with running.channel() as chan, pytest.raises(grpc.RpcError) as err:
        converse(chan, [hello(), batch(1, events=[agent_pb2.Event(kind="x", message="m" * size)])])
    return err.value.details()


def test_health_service(collector):
    with collector.channel() as chan:
        stub = health_pb2_grpc.HealthStub(chan)
        for service in ("", "stepwatch.v1.AgentService"):
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_expiry_removes_series(collector):
    with collector.channel() as chan:
        converse(chan, [hello(), batch(1, steps=[step(1)])])
    clock = collector.clock
    assert collector.collector.housekeeping() == []
    clock.now += 301
    assert collector.collector.housekeeping() == [("j", 0)]
    text = collector.get("/metrics")[2].decode()
    assert "stepwatch_steps_total{" not in text and "stepwatch_agent_connected{" not in text


def test_record_file(start_collector, tmp_path):
    path = tmp_path / "rec.jsonl"
    running = start_collector(record=str(path))
    b1 = batch(12, steps=[step(1, samples=8, tokens=8192), step(2)],
               allocator=[agent_pb2.AllocatorSample(time_s=1_700_000_005.0, allocated_bytes=1, reserved_bytes=2, active_bytes=3,
                                                    inactive_split_bytes=4, alloc_retries=5, ooms=6, device_total_bytes=7)])
    with running.channel() as chan:
        converse(chan, [hello(session="sess"), b1, b1])
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    # The duplicate (resent) batch is not recorded: connect, one batch, disconnect.
    assert [(ln["v"], ln["kind"]) for ln in lines] == [(1, "connect"), (1, "batch"), (1, "disconnect")]
    assert lines[0]["hello"]["session_id"] == "sess"
    assert (lines[1]["job"], lines[1].get("rank", 0), lines[1]["session"]) == ("j", 0, "sess")
    events = list(read_record(path.read_text().splitlines()))
    assert [e.kind for e in events] == ["connect", "batch", "disconnect"]
    assert events[1].batch == b1.batch  # the wire message, unchanged by the round trip
    assert events[0].hello.host == "node-a" and events[0].time == 1700000000.0


def test_api_jobs_lists_every_job_without_events_and_one_job_with_them(collector):
    """/api/jobs copies no step lists or events (a fleet-wide request); ?job=NAME has them."""
    with collector.channel() as chan:
        for job in ("a", "b"):
            converse(chan, [hello(job=job, session=f"s-{job}"),
                            batch(1, steps=[step(1)], events=[agent_pb2.Event(time_s=1.0, kind="oom", message=f"{job} boom")])])
    listing = json.loads(collector.get("/api/jobs")[2])["jobs"]
    assert [j["job"] for j in listing] == ["a", "b"]
    assert all("events" not in r and r["event_counts"] == {"oom": 1} and r["steps_total"] == 1
               for j in listing for r in j["ranks"])
    (one,) = json.loads(collector.get("/api/jobs?job=b")[2])["jobs"]
    assert one["job"] == "b" and [e["message"] for e in one["ranks"][0]["events"]] == ["b boom"]
    assert json.loads(collector.get("/api/jobs?job=nope")[2]) == {"jobs": []}
