"""Per-rank series modes (full / summary / off) and the per-job aggregates, over real gRPC and
the real /metrics endpoint, parsed by prometheus_client's text and OpenMetrics parsers."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import batch, hello, step
from stepwatch.collector._config import SettingsError, load_settings
from stepwatch.collector.export._metrics import SUMMARY
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

T0 = 1_700_000_000.0
STEP_S = {0: 0.030, 1: 0.030, 2: 0.045}  # rank 2 is the slow one


def _rank_batch(rank: int) -> agent_pb2.AgentMessage:
    """Everything an agent on a Hopper GPU sends: steps, allocator, NVML + GPM, host, a window,
    events and stats."""
    d = STEP_S[rank]
    return batch(
        1, steps=[step(n, duration=d, wait=0.002, samples=8, tokens=8192) for n in range(1, 21)],
        allocator=[agent_pb2.AllocatorSample(time_s=T0, device=0, allocated_bytes=1000, reserved_bytes=4000 + rank,
                                             active_bytes=1200, inactive_split_bytes=300, alloc_retries=0, ooms=0,
                                             device_total_bytes=141 << 30)],
        gpu_samples=[agent_pb2.GpuSample(
            time_s=T0, utilization_ratio=0.9 + rank / 100, memory_utilization_ratio=0.3, memory_used_bytes=5 << 30,
            memory_total_bytes=141 << 30, power_watts=500.0, energy_joules=1e6, temperature_celsius=50,
            sm_clock_hertz=1.98e9, memory_clock_hertz=2.6e9, clock_event_reasons=0x4, ecc_corrected_errors=0,
            ecc_uncorrected_errors=0, sm_active_ratio=0.8, sm_occupancy_ratio=0.1, tensor_active_ratio=0.7,
            tensor_hmma_active_ratio=0.7, tensor_imma_active_ratio=0.0, tensor_dmma_active_ratio=0.0,
            fp16_active_ratio=0.01, fp32_active_ratio=0.02, fp64_active_ratio=0.0, dram_active_ratio=0.14,
            pcie_tx_bytes_per_second=2.5e8, pcie_rx_bytes_per_second=2.5e8, nvlink_tx_bytes_per_second=3e11,
            nvlink_rx_bytes_per_second=3e11)],
        host=[agent_pb2.HostSample(time_s=T0, cpu_seconds=12.5, resident_memory_bytes=2 << 30, threads=40,
                                   children=4, io_read_bytes=1, io_write_bytes=2, host_memory_available_bytes=1 << 36)],
        windows=[agent_pb2.WindowSummary(
            window_id=1, first_step=8, last_step=12, start_time_s=T0, activities="cuda", span_s=0.2,
            gpu_busy_ratio=0.9, gpu_idle_ratio=0.1, compute_s=0.1 + rank * 0.05, communication_s=0.05,
            kernel_count=100, top_kernels=[agent_pb2.NamedTime(name=f"k{i}", seconds=0.01, count=1) for i in range(6)],
            top_ops=[agent_pb2.NamedTime(name=f"aten::op{i}", seconds=0.01, count=1) for i in range(6)],
            breakdown=agent_pb2.StepBreakdown(step_time_s=d, forward_s=0.01, backward_s=0.01, communication_s=0.001))],
        phase_times=[agent_pb2.StepPhaseTimes(step=n, end_time_s=T0, points=15, data_s=0.001, forward_s=0.01,
                                              backward_s=0.012 + rank * 0.001 * (n % 3), sync_s=0.002,
                                              optimizer_s=0.005) for n in range(1, 21, 2)],
        events=[agent_pb2.Event(time_s=T0, kind="window_skipped", message="x")],
        stats=agent_pb2.AgentStats(windows=2, window_skips={"budget": 1}, overhead_ratio=0.003, records_dropped=0,
                                   hook_errors=0, spool_bytes=0))


def _scrape(start_collector, mode: str, openmetrics: bool = False) -> str:
    running = start_collector(metrics_per_rank=mode)
    for rank in STEP_S:
        with running.channel() as chan:
            gpu = agent_pb2.GpuIdentity(index=rank, uuid=f"GPU-{rank}", name="NVIDIA H200")
            msgs = [hello(rank=rank, gpu=gpu), _rank_batch(rank)]
            list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(msgs), timeout=10))
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    return running.get("/metrics", headers)[2].decode()


def _samples(text: str, openmetrics: bool = False) -> list:
    parse = om_families if openmetrics else text_string_to_metric_families
    return [s for fam in parse(text) for s in fam.samples]


def _per_rank(samples) -> dict:
    out: dict = {}
    for s in samples:
        if "rank" in s.labels and not s.name.startswith("stepwatch_job_"):
            out.setdefault(s.labels["rank"], []).append(s)
    return out


def _value(samples, name, **labels):
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def _job_aggregates_hold(samples) -> None:
    assert _value(samples, "stepwatch_job_ranks", training_job="j", state="disconnected") == 3
    assert _value(samples, "stepwatch_job_step_duration_seconds_count", training_job="j") == 60
    assert _value(samples, "stepwatch_job_step_duration_seconds_bucket", training_job="j", le="0.025") == 0
    assert _value(samples, "stepwatch_job_step_duration_seconds_bucket", training_job="j", le="0.05") == 60
    assert _value(samples, "stepwatch_job_rank_step_seconds", training_job="j", stat="max") == pytest.approx(0.045)
    assert _value(samples, "stepwatch_job_rank_step_seconds", training_job="j", stat="median") == pytest.approx(0.030)
    assert _value(samples, "stepwatch_job_slowest_rank", training_job="j") == 2
    assert _value(samples, "stepwatch_job_gpu_utilization_ratio", training_job="j", stat="min") == pytest.approx(0.90)
    assert _value(samples, "stepwatch_job_rank_skew_ratio", training_job="j") == pytest.approx(0.04 / 0.03)


def test_summary_is_the_default_and_keeps_at_most_34_series_per_rank(start_collector):
    text = _scrape(start_collector, "summary")
    samples = _samples(text)
    by_rank = _per_rank(samples)
    assert set(by_rank) == {"0", "1", "2"}
    for rank, got in by_rank.items():
        assert len(got) <= 34, (rank, len(got), sorted(s.name for s in got))
        names = {s.name.removesuffix("_total").removesuffix("_info").removesuffix("_bucket").removesuffix("_sum")
                 .removesuffix("_count") for s in got}
        assert names <= SUMMARY, names - SUMMARY
    # Only the rank info series carries local_rank, node and the GPU identity.
    wide = {s.name for s in samples if "node" in s.labels}
    assert wide == {"stepwatch_rank_info"}, wide
    assert _value(samples, "stepwatch_rank_info", rank="2")  # 1
    info = next(s for s in samples if s.name == "stepwatch_rank_info" and s.labels["rank"] == "2")
    assert info.labels == {"training_job": "j", "rank": "2", "local_rank": "2", "node": "node-a", "gpu": "2",
                           "UUID": "GPU-2", "modelName": "NVIDIA H200"}
    # The rank histogram keeps its +Inf bucket: rate(_sum) / rate(_count) is the mean.
    buckets = [s for s in samples if s.name == "stepwatch_step_duration_seconds_bucket" and s.labels["rank"] == "0"]
    assert [s.labels["le"] for s in buckets] == ["+Inf"] and buckets[0].value == 20
    # Only the active clock event reason (sw_power_cap) is exported.
    reasons = [s.labels["reason"] for s in samples if s.name == "stepwatch_gpu_clock_event_active"]
    assert reasons == ["sw_power_cap"] * 3
    assert _value(samples, "stepwatch_collector_per_rank_series", mode="summary") == 1
    _job_aggregates_hold(samples)


def test_full_keeps_every_series_and_the_same_aggregates(start_collector):
    samples = _samples(_scrape(start_collector, "full"))
    by_rank = _per_rank(samples)
    assert all(len(got) > 100 for got in by_rank.values()), {r: len(g) for r, g in by_rank.items()}
    assert _value(samples, "stepwatch_gpu_fp32_active_ratio", rank="1", UUID="GPU-1") == pytest.approx(0.02)
    assert _value(samples, "stepwatch_step_duration_seconds_bucket", rank="2", le="0.05") == 20
    # the median of the rank's sampled phase times (rank 2's backward: 12, 14 or 16 ms, median 14)
    assert _value(samples, "stepwatch_step_phase_seconds", rank="2", phase="backward") == pytest.approx(0.014)
    assert _value(samples, "stepwatch_step_phase_seconds", rank="0", phase="sync") == pytest.approx(0.002)
    _job_aggregates_hold(samples)


def test_off_has_no_per_rank_series(start_collector):
    samples = _samples(_scrape(start_collector, "off"))
    assert not _per_rank(samples), sorted({s.name for s in samples if "rank" in s.labels})
    assert _value(samples, "stepwatch_collector_per_rank_series", mode="off") == 1
    _job_aggregates_hold(samples)


@pytest.mark.parametrize("mode", ["full", "summary", "off"])
def test_openmetrics_in_every_mode(start_collector, mode):
    text = _scrape(start_collector, mode, openmetrics=True)
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    samples = _samples(text, openmetrics=True)
    _job_aggregates_hold(samples)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_summary(start_collector):
    body = _scrape(start_collector, "summary").encode()
    proc = subprocess.run(["promtool", "check", "metrics"], input=body.replace(b"modelName=", b"model_name="),
                          capture_output=True, timeout=30)
    assert proc.stdout + proc.stderr == b"" and proc.returncode == 0, proc.stdout + proc.stderr


def test_a_bad_mode_names_the_option():
    with pytest.raises(SettingsError, match="metrics_per_rank.*full, summary or off"):
        load_settings({"metrics_per_rank": "some"}, environ={})
