"""Prometheus export of :class:`CollectorState` as a custom collector.

``StepwatchMetrics(state, registry)`` registers itself on the registry it is given (never the
global one). ``collect`` runs on whichever thread scrapes; it reads a snapshot, so it never
blocks ingest for longer than a copy. A metric with no sample source for a rank is not
emitted for that rank. Base units only, no timestamps, labels per ARCHITECTURE.md.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                    InfoMetricFamily, Metric)
from prometheus_client.registry import Collector, CollectorRegistry

from ._state import CollectorState, RankState

__all__ = ["StepwatchMetrics", "CLOCK_EVENT_REASONS"]

RANK_LABELS = ("training_job", "rank", "local_rank", "node")
GPU_LABELS = RANK_LABELS + ("gpu", "UUID", "modelName")

# NVML nvmlClocksEventReason* bits (nvml.h).
CLOCK_EVENT_REASONS = (
    ("gpu_idle", 0x1), ("applications_clocks_setting", 0x2), ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8), ("sync_boost", 0x10), ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40), ("hw_power_brake_slowdown", 0x80), ("display_clock_setting", 0x100),
)

# (metric name, HELP, type, field) for AllocatorSample; all present once a sample exists.
_ALLOCATOR = (
    ("stepwatch_allocator_allocated_bytes", "Bytes held by live tensors in the CUDA caching allocator.", "g", "allocated_bytes"),
    ("stepwatch_allocator_reserved_bytes", "Bytes reserved from the device by the CUDA caching allocator.", "g", "reserved_bytes"),
    ("stepwatch_allocator_active_bytes", "Bytes in active allocator blocks.", "g", "active_bytes"),
    ("stepwatch_allocator_inactive_split_bytes", "Bytes in inactive, non-releasable split blocks (fragmentation).", "g", "inactive_split_bytes"),
    ("stepwatch_allocator_alloc_retries", "cudaMalloc retries after a cache flush (num_alloc_retries).", "c", "alloc_retries"),
    ("stepwatch_allocator_ooms", "Out-of-memory errors raised by the CUDA caching allocator (num_ooms).", "c", "ooms"),
    ("stepwatch_allocator_device_total_bytes", "Total memory of the rank's device in bytes.", "g", "device_total_bytes"),
)
# GpuSample optional fields.
_GPU = (
    ("stepwatch_gpu_utilization_ratio", "Share of time a kernel ran on the GPU (NVML), 0-1.", "g", "utilization_ratio"),
    ("stepwatch_gpu_memory_utilization_ratio", "Share of time device memory was read or written (NVML), 0-1.", "g", "memory_utilization_ratio"),
    ("stepwatch_gpu_memory_used_bytes", "Device memory in use in bytes (NVML).", "g", "memory_used_bytes"),
    ("stepwatch_gpu_memory_total_bytes", "Device memory capacity in bytes (NVML).", "g", "memory_total_bytes"),
    ("stepwatch_gpu_power_watts", "GPU power draw in watts.", "g", "power_watts"),
    ("stepwatch_gpu_energy_joules", "GPU energy consumed since the driver was loaded, in joules.", "c", "energy_joules"),
    ("stepwatch_gpu_temperature_celsius", "GPU temperature in degrees Celsius.", "g", "temperature_celsius"),
    ("stepwatch_gpu_sm_clock_hertz", "GPU SM clock in hertz.", "g", "sm_clock_hertz"),
    ("stepwatch_gpu_memory_clock_hertz", "GPU memory clock in hertz.", "g", "memory_clock_hertz"),
    ("stepwatch_gpu_clock_event_reasons", "NVML clock event (throttle) reason bitmask.", "g", "clock_event_reasons"),
    # NVML GPM (Hopper and newer), the DCGM profiling fields' meanings
    ("stepwatch_gpu_sm_active_ratio", "Share of time at least one warp was active on an SM, averaged over SMs (GPM), 0-1.", "g", "sm_active_ratio"),
    ("stepwatch_gpu_sm_occupancy_ratio", "Resident warps vs the maximum, averaged over SMs (GPM), 0-1.", "g", "sm_occupancy_ratio"),
    ("stepwatch_gpu_tensor_active_ratio", "Share of time any tensor pipe was active (GPM), 0-1.", "g", "tensor_active_ratio"),
    ("stepwatch_gpu_tensor_hmma_active_ratio", "Share of time the HMMA tensor pipe (fp16/bf16/tf32) was active (GPM), 0-1.", "g", "tensor_hmma_active_ratio"),
    ("stepwatch_gpu_tensor_imma_active_ratio", "Share of time the IMMA tensor pipe (int8) was active (GPM), 0-1.", "g", "tensor_imma_active_ratio"),
    ("stepwatch_gpu_tensor_dmma_active_ratio", "Share of time the DMMA tensor pipe (fp64) was active (GPM), 0-1.", "g", "tensor_dmma_active_ratio"),
    ("stepwatch_gpu_fp16_active_ratio", "Share of time the non-tensor FP16 pipe was active (GPM), 0-1.", "g", "fp16_active_ratio"),
    ("stepwatch_gpu_fp32_active_ratio", "Share of time the non-tensor FP32 pipe was active (GPM), 0-1.", "g", "fp32_active_ratio"),
    ("stepwatch_gpu_fp64_active_ratio", "Share of time the non-tensor FP64 pipe was active (GPM), 0-1.", "g", "fp64_active_ratio"),
    ("stepwatch_gpu_dram_active_ratio", "DRAM bandwidth used vs the peak (GPM), 0-1.", "g", "dram_active_ratio"),
    ("stepwatch_gpu_pcie_tx_bytes_per_second", "PCIe bytes per second sent by the GPU (GPM).", "g", "pcie_tx_bytes_per_second"),
    ("stepwatch_gpu_pcie_rx_bytes_per_second", "PCIe bytes per second received by the GPU (GPM).", "g", "pcie_rx_bytes_per_second"),
    ("stepwatch_gpu_nvlink_tx_bytes_per_second", "NVLink bytes per second sent by the GPU, all links (GPM).", "g", "nvlink_tx_bytes_per_second"),
    ("stepwatch_gpu_nvlink_rx_bytes_per_second", "NVLink bytes per second received by the GPU, all links (GPM).", "g", "nvlink_rx_bytes_per_second"),
)
# HostSample fields; the optional ones are skipped when absent.
_HOST = (
    ("stepwatch_process_cpu_seconds", "User and system CPU seconds of the trainer process.", "c", "cpu_seconds"),
    ("stepwatch_process_resident_memory_bytes", "Resident memory of the trainer process in bytes.", "g", "resident_memory_bytes"),
    ("stepwatch_process_threads", "Threads of the trainer process.", "g", "threads"),
    ("stepwatch_process_children", "Child processes of the trainer (e.g. DataLoader workers).", "g", "children"),
    ("stepwatch_process_io_read_bytes", "Bytes read by the trainer process.", "c", "io_read_bytes"),
    ("stepwatch_process_io_write_bytes", "Bytes written by the trainer process.", "c", "io_write_bytes"),
    ("stepwatch_host_memory_available_bytes", "Host memory available in bytes.", "g", "host_memory_available_bytes"),
)
_STATS = (
    ("stepwatch_agent_records_dropped", "Records the agent dropped because a bounded buffer was full.", "records_dropped"),
    ("stepwatch_agent_hook_errors", "Exceptions caught inside the agent's hooks in the trainer.", "hook_errors"),
    ("stepwatch_agent_spool_batches_dropped", "Batches dropped from the agent's disk spool (size limit).", "spool_batches_dropped"),
)


def _family(name: str, doc: str, kind: str, labels) -> Metric:
    cls = CounterMetricFamily if kind == "c" else GaugeMetricFamily
    return cls(name, doc, labels=list(labels))


def rank_labels(st: RankState) -> list[str]:
    return [st.job, str(st.rank), str(st.hello.local_rank), st.hello.host]


def gpu_labels(st: RankState) -> list[str]:
    gpu = st.gpu
    if gpu is None:
        return rank_labels(st) + ["", "", ""]
    return rank_labels(st) + [str(gpu.index), gpu.uuid, gpu.name]


class StepwatchMetrics(Collector):
    """Custom collector exporting every rank of ``state``; registers itself on ``registry``."""

    def __init__(self, state: CollectorState, registry: CollectorRegistry):
        self._state = state
        registry.register(self)

    def describe(self) -> list:
        return []  # families vary with the data; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        ranks = self._state.snapshot()
        yield from self._collect_self()
        per_rank = (self._collect_steps(ranks),
                    _collect_samples(ranks, _ALLOCATOR, lambda st: st.allocator, rank_labels),
                    _collect_samples(ranks, _GPU, lambda st: st.gpu_sample, gpu_labels),
                    _collect_gpu_extra(ranks),
                    _collect_samples(ranks, _HOST, lambda st: st.host, rank_labels),
                    _collect_agent(ranks))
        for families in per_rank:
            yield from (fam for fam in families if fam.samples)  # no source, no metric

    def _collect_self(self) -> Iterator[Metric]:
        c = self._state.counters()
        yield GaugeMetricFamily("stepwatch_collector_connected_agents", "Agent streams (ranks) connected now.",
                                value=self._state.connected_agents())
        yield CounterMetricFamily("stepwatch_collector_streams", "Agent streams accepted (valid Hello).",
                                  value=c["streams_accepted"])
        yield CounterMetricFamily("stepwatch_collector_batches_received", "Batches received from agents, duplicates included.",
                                  value=c["batches_received"])
        yield CounterMetricFamily("stepwatch_collector_batches_duplicate", "Batches received again (already applied), acked and ignored.",
                                  value=c["batches_duplicate"])
        yield CounterMetricFamily("stepwatch_collector_decode_errors", "Agent messages that failed protobuf decoding.",
                                  value=c["decode_errors"])
        yield CounterMetricFamily("stepwatch_collector_nonfinite_records",
                                  "Agent records dropped at ingest for a NaN or infinite number.",
                                  value=c["nonfinite_records"])
        rejected = CounterMetricFamily("stepwatch_collector_streams_rejected", "Agent streams rejected, by reason.",
                                       labels=["reason"])
        for reason, n in sorted(c["streams_rejected"].items()):
            rejected.add_metric([reason], n)
        yield rejected
        trimmed = CounterMetricFamily("stepwatch_collector_trimmed", "Agent data cut to the collector's bounds, by what: "
                                      "label (a Hello label value over 256 characters), event_message (over 1,024), "
                                      "window_names (a window's kernel/op list over 50 entries or a name over 256).",
                                      labels=["what"])
        for what, n in sorted(c["trimmed"].items()):
            trimmed.add_metric([what], n)
        yield trimmed
        yield CounterMetricFamily("stepwatch_collector_records_dropped", "Records dropped by agents, summed over all agents seen.",
                                  value=c["records_dropped"])

    @staticmethod
    def _collect_steps(ranks: list[RankState]) -> Iterator[Metric]:
        steps = CounterMetricFamily("stepwatch_steps", "Training steps completed (cumulative agent count).", labels=RANK_LABELS)
        dur = HistogramMetricFamily("stepwatch_step_duration_seconds", "Duration of training steps in seconds.", labels=RANK_LABELS)
        wait = HistogramMetricFamily("stepwatch_dataloader_wait_seconds", "Seconds per step spent waiting for the DataLoader.",
                                     labels=RANK_LABELS)
        ratio = GaugeMetricFamily("stepwatch_dataloader_wait_ratio", "Share of step time spent waiting for data, last 100 steps.",
                                  labels=RANK_LABELS)
        last = GaugeMetricFamily("stepwatch_last_step_timestamp_seconds", "Unix time at which the last step ended.",
                                 labels=RANK_LABELS)
        samples = CounterMetricFamily("stepwatch_samples", "Training samples processed.", labels=RANK_LABELS)
        tokens = CounterMetricFamily("stepwatch_tokens", "Training tokens processed.", labels=RANK_LABELS)
        for st in ranks:
            labels = rank_labels(st)
            steps.add_metric(labels, st.steps_total)
            if st.step_hist.count:
                dur.add_metric(labels, st.step_hist.cumulative(), st.step_hist.sum)
                wait.add_metric(labels, st.wait_hist.cumulative(), st.wait_hist.sum)
            if st.dataloader_wait_ratio is not None:
                ratio.add_metric(labels, st.dataloader_wait_ratio)
            if st.last_step_time is not None:
                last.add_metric(labels, st.last_step_time)
            if st.samples_known:
                samples.add_metric(labels, st.samples_total)
            if st.tokens_known:
                tokens.add_metric(labels, st.tokens_total)
        yield from (steps, dur, wait, ratio, last, samples, tokens)


def _collect_samples(ranks, table, pick, labeller) -> Iterator[Metric]:
    """One family per ``table`` row; a rank lacking the sample or the optional field is skipped."""
    for name, doc, kind, field in table:
        fam = _family(name, doc, kind, GPU_LABELS if labeller is gpu_labels else RANK_LABELS)
        for st in ranks:
            sample = pick(st)
            if sample is None or (sample.DESCRIPTOR.fields_by_name[field].has_presence
                                  and not sample.HasField(field)):
                continue
            fam.add_metric(labeller(st), float(getattr(sample, field)))
        yield fam


def _collect_gpu_extra(ranks: list[RankState]) -> Iterator[Metric]:
    active = GaugeMetricFamily("stepwatch_gpu_clock_event_active", "1 while the NVML clock event reason is active.",
                               labels=list(GPU_LABELS) + ["reason"])
    ecc = CounterMetricFamily("stepwatch_gpu_ecc_errors", "Volatile ECC errors since the last driver reload.",
                              labels=list(GPU_LABELS) + ["type"])
    for st in ranks:
        g = st.gpu_sample
        if g is None:
            continue
        labels = gpu_labels(st)
        if g.HasField("clock_event_reasons"):
            for reason, bit in CLOCK_EVENT_REASONS:
                active.add_metric(labels + [reason], 1.0 if g.clock_event_reasons & bit else 0.0)
        if g.HasField("ecc_corrected_errors"):
            ecc.add_metric(labels + ["corrected"], g.ecc_corrected_errors)
        if g.HasField("ecc_uncorrected_errors"):
            ecc.add_metric(labels + ["uncorrected"], g.ecc_uncorrected_errors)
    yield from (active, ecc)


def _collect_agent(ranks: list[RankState]) -> Iterator[Metric]:
    connected = GaugeMetricFamily("stepwatch_agent_connected", "1 while the rank's agent is connected, 0 during the grace period.",
                                  labels=RANK_LABELS)
    info = InfoMetricFamily("stepwatch_agent", "Versions reported by the rank's agent.", labels=RANK_LABELS)
    stats = [CounterMetricFamily(name, doc, labels=RANK_LABELS) for name, doc, _ in _STATS]
    spool = GaugeMetricFamily("stepwatch_agent_spool_bytes", "Bytes held in the agent's disk spool.", labels=RANK_LABELS)
    events = CounterMetricFamily("stepwatch_agent_events", "Agent events by kind (at most 32 kinds, then 'other').",
                                 labels=list(RANK_LABELS) + ["kind"])
    for st in ranks:
        labels, h = rank_labels(st), st.hello
        connected.add_metric(labels, 1.0 if st.connected else 0.0)
        info.add_metric(labels, {"agent_version": h.agent_version, "torch_version": h.torch_version,
                                 "cuda_version": h.cuda_version, "driver_version": h.driver_version})
        if st.stats is not None:
            for fam, (_, _, field) in zip(stats, _STATS):
                fam.add_metric(labels, getattr(st.stats, field))
            spool.add_metric(labels, st.stats.spool_bytes)
        for kind, n in sorted(st.event_counts.items()):
            events.add_metric(labels + [kind], n)
    yield from (connected, info, *stats, spool, events)
