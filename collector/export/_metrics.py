"""Prometheus export of :class:`CollectorState`: per-job aggregates and per-rank series.

``RankMetrics(state, mode, top_k).families()`` runs on whichever thread scrapes; it reads the
state once as columns (``_rank_table``, a chunk of ranks per hold of the lock), so it never
blocks ingest for longer than a chunk. Per-rank detail by ``mode``:

* ``full``: every series (about 110-150 per GPU rank with windows).
* ``summary`` (default): at most 34 per rank (``SUMMARY``; 33 + the clock event reasons active
  now, usually none): step, allocator, the main GPU and host counters, agent health,
  compute/communication per step; histograms keep only their +Inf bucket (rate of _sum / _count
  is the mean) and GPU series carry the GPU index, with UUID and model in
  ``stepwatch_gpu_info``. Everything else stays on ``/api``.
* ``off``: no per-rank series.

Per-job aggregates are always there (``_job_metrics``). A metric with no sample source for a
rank is not emitted for that rank. Base units only, no timestamps, labels per ARCHITECTURE.md.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from ._exposition import Family, labels_text
from ..wire import PHASES
from ._job_metrics import job_families
from ._rank_table import RankTable
from ..state import STEP_BUCKETS, WAIT_BUCKETS, CollectorState, cumulative
from ._windows_metrics import window_families
from ..state import PAUSE_EVERY_RANKS, no_pause

__all__ = ["RankMetrics", "MODES", "SUMMARY", "CLOCK_EVENT_REASONS", "RANK_LABELS", "connected_families"]

MODES = ("full", "summary", "off")
RANK_LABELS = ("training_job", "rank", "local_rank", "node")
SUMMARY_LABELS = ("training_job", "rank")
GPU_LABELS = RANK_LABELS + ("gpu", "UUID", "modelName")

# Family names kept per rank in summary mode (counters without _total).
SUMMARY = frozenset((
    "stepwatch_rank", "stepwatch_steps", "stepwatch_step_duration_seconds", "stepwatch_dataloader_wait_ratio",
    "stepwatch_last_step_timestamp_seconds", "stepwatch_samples", "stepwatch_tokens",
    "stepwatch_allocator_allocated_bytes", "stepwatch_allocator_reserved_bytes",
    "stepwatch_allocator_inactive_split_bytes", "stepwatch_allocator_alloc_retries",
    "stepwatch_allocator_ooms", "stepwatch_allocator_device_total_bytes",
    "stepwatch_gpu_utilization_ratio", "stepwatch_gpu_memory_used_bytes", "stepwatch_gpu_power_watts",
    "stepwatch_gpu_temperature_celsius", "stepwatch_gpu_sm_clock_hertz", "stepwatch_gpu_clock_event_active",
    "stepwatch_gpu_sm_active_ratio", "stepwatch_gpu_tensor_active_ratio",
    "stepwatch_process_cpu_seconds", "stepwatch_process_resident_memory_bytes",
    "stepwatch_host_memory_available_bytes",
    "stepwatch_agent_connected", "stepwatch_agent_records_dropped", "stepwatch_agent_hook_errors",
    "stepwatch_agent_spool_batches_dropped",
    "stepwatch_rank_compute_seconds_per_step", "stepwatch_rank_communication_seconds_per_step",
    "stepwatch_agent_overhead_ratio", "stepwatch_agent_window_aftereffect_ratio",
))

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
    ("stepwatch_allocator_device_allocs", "cudaMalloc calls of the CUDA caching allocator (num_device_alloc).", "c", "device_allocs"),
    ("stepwatch_allocator_device_frees", "cudaFree calls of the CUDA caching allocator (num_device_free).", "c", "device_frees"),
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



_KIND = {"c": "counter", "g": "gauge"}


class RankMetrics:
    """The per-rank and per-job families of ``state`` for one scrape."""

    def __init__(self, state: CollectorState, mode: str = "summary", top_k: int = 5):
        if mode not in MODES:
            raise ValueError(f"metrics per-rank mode: expected one of {', '.join(MODES)}, got {mode!r}")
        self._state, self.mode, self._top_k = state, mode, top_k
        self._labels: dict = {}  # (job, rank) -> (Hello, GpuIdentity, Labels texts)

    def families(self, pause: Callable[[], None] = no_pause, frozen: bool = False) -> list[Family]:
        """``pause``: called between stages (a scrape giving way to ingest: ``_yield``).
        ``frozen``: nothing writes the state meanwhile (a forked render process): no lock."""
        full = self.mode == "full"
        table = RankTable.read(self._state, full, pause, frozen)
        pause()
        mode = Family("stepwatch_collector_per_rank_series", "1 for the collector's per-rank series mode "
                      "(full, summary: a bounded set, off: per-job aggregates only).", "gauge")
        mode.add(f'mode="{self.mode}"', 1)
        fams = [mode, *job_families(table, pause)]
        if self.mode == "off":
            return fams
        labels = self._texts(table)
        keep: Callable[[str], bool] = (lambda name: True) if full else SUMMARY.__contains__
        for stage in (lambda: _info(labels), lambda: _steps(table, labels, full, pause),
                      lambda: _samples(table, labels.rank, _ALLOCATOR, "allocator", keep, pause),
                      lambda: _samples(table, labels.gpu, _GPU, "gpu_sample", keep, pause),
                      lambda: _gpu_extra(table, labels.gpu, full),
                      lambda: _samples(table, labels.rank, _HOST, "host", keep, pause),
                      lambda: _agent(table, labels.rank, full),
                      lambda: window_families(table, labels.rank, full, self._top_k)):
            pause()
            fams += stage()
        return fams

    def _texts(self, table: RankTable) -> "Labels":
        """Each rank's label texts, from the cache (:meth:`_text`)."""
        if len(self._labels) > 2 * len(table) + 1024:
            self._labels.clear()  # ranks that left (without warm())
        texts = list(map(self._text, table.job, table.rank, table.hello, table.gpu))
        return Labels(*map(list, zip(*texts))) if texts else Labels([], [], [])

    def _text(self, job: str, rank: int, hello, gpu) -> tuple[str, str, str]:
        """A rank's label texts, rendered when its Hello or GPU identity is new to the cache
        (both are replaced whole, never changed, so identity tells; the cache holds them)."""
        held = _held(self._labels.get((job, rank)), job, rank, hello, gpu, self.mode == "full")
        self._labels[(job, rank)] = held
        return held[2]

    def warm(self, pause: Callable[[], None] = no_pause) -> None:
        """Render the label texts of ranks new since the last call into the cache, here, and
        drop those of ranks that left: a forked render's own additions die with it, and the
        thread's render then has no long stage for them (10,000 ranks' texts are ~50 ms on the
        development machine; looking them up ~5 ms). Called before each scrape; ``pause``
        between chunks (a scrape's yield)."""
        old, new, full = self._labels, {}, self.mode == "full"

        def read(states: list) -> None:
            for st in states:
                new[st.job, st.rank] = _held(old.get((st.job, st.rank)), st.job, st.rank, st.hello, st.gpu, full)

        self._state.read_ranks(read, pause=pause)
        self._labels = new


def _held(held: Optional[tuple], job: str, rank: int, hello, gpu, full: bool) -> tuple:
    """A rank's cache entry ``(hello, gpu, texts)``: ``held`` while it was rendered from this
    Hello and GPU identity (both are replaced whole, never changed, so identity tells), else
    rendered anew."""
    if held is None or held[0] is not hello or held[1] is not gpu:
        held = (hello, gpu, _label_texts(job, rank, hello, gpu, full))
    return held


class Labels(NamedTuple):
    """Label texts per rank: ``rank`` for its series, ``gpu`` for its GPU series, ``info`` its
    full label set (``stepwatch_rank_info``). Summary series carry training_job and rank only."""

    rank: list
    gpu: list
    info: list


def _label_texts(job: str, rank: int, hello, gpu, full: bool) -> tuple[str, str, str]:
    key = (job, rank, hello.local_rank, hello.host, *((gpu.index, gpu.uuid, gpu.name) if gpu is not None else ()))
    ident = labels_text(RANK_LABELS, key[:4])
    every = labels_text(GPU_LABELS, key) if gpu is not None else ident  # a CPU rank: no GPU labels
    if full:
        return ident, every, every
    short = labels_text(SUMMARY_LABELS, key[:2])
    return short, f'{short},gpu="{gpu.index if gpu is not None else ""}"', every


def connected_families(state: CollectorState) -> list[tuple]:
    """The agent streams (ranks) connected now, in the declared form (:class:`Declared`)."""
    return [("stepwatch_collector_connected_agents", "Agent streams (ranks) connected now.", "gauge",
             [((), (), state.connected_agents())])]


def _info(labels: Labels) -> list[Family]:
    """``stepwatch_rank_info``: local_rank, node and the GPU, for joins (summary mode's other
    series carry training_job and rank only)."""
    info = Family("stepwatch_rank", "The rank's local rank, node and GPU (summary mode: the other "
                  "per-rank series carry training_job and rank only; join on them).", "info")
    info.add_column(labels.info, [1] * len(labels.info))
    return [info]


def _steps(t: RankTable, labels: Labels, full: bool, pause: Callable[[], None] = no_pause) -> list[Family]:
    """Summary mode: histograms as their +Inf bucket; the wait histogram only in full mode.
    ``pause`` every PAUSE_EVERY_RANKS ranks of full mode's histograms (a scrape's yield)."""
    steps = Family("stepwatch_steps", "Training steps completed (cumulative agent count).", "counter")
    dur = Family("stepwatch_step_duration_seconds", "Duration of training steps in seconds (summary mode: "
                 "the +Inf bucket only; stepwatch_job_step_duration_seconds has the buckets).", "histogram")
    wait = Family("stepwatch_dataloader_wait_seconds", "Seconds per step spent waiting for the DataLoader.",
                  "histogram")
    ratio = Family("stepwatch_dataloader_wait_ratio", "Share of step time spent waiting for data, last 100 steps.",
                   "gauge")
    last = Family("stepwatch_last_step_timestamp_seconds", "Unix time at which the last step ended.", "gauge")
    samples = Family("stepwatch_samples", "Training samples processed.", "counter")
    tokens = Family("stepwatch_tokens", "Training tokens processed.", "counter")
    steps.add_column(labels.rank, t.steps_total)
    if full:
        for i, (lab, n) in enumerate(zip(labels.rank, t.step_count)):
            if i % PAUSE_EVERY_RANKS == PAUSE_EVERY_RANKS - 1:
                pause()
            if n:  # (the wait histogram with the steps', as the agent times both per step)
                dur.add_histogram(lab, cumulative(STEP_BUCKETS, t.step_counts[i]), t.step_sum[i])
                wait.add_histogram(lab, cumulative(WAIT_BUCKETS, t.wait_counts[i]), t.wait_sum[i])
    else:
        dur.add_totals(labels.rank, t.step_count, t.step_sum)
    ratio.add_column(labels.rank, t.wait_ratio())
    last.add_column(labels.rank, t.last_step_time)
    samples.add_column(labels.rank, [n if known else None for n, known in zip(t.samples_total, t.samples_known)])
    tokens.add_column(labels.rank, [n if known else None for n, known in zip(t.tokens_total, t.tokens_known)])
    out = [steps, dur, wait, ratio, last, samples, tokens]
    if full:  # (five series per rank: full mode only)
        phase = Family("stepwatch_step_phase_seconds", "Median seconds per step in each phase (data, forward, "
                       "backward, sync, optimizer) of the rank's last 32 sampled steps, on the device's timeline "
                       "(the agents' phase times; they sum to the step).", "gauge")
        for k, name in enumerate(PHASES):
            phase.add_column(labels.rank, [p[k] if p is not None else None for p in t.phases],
                             labels_text(("phase",), (name,)))
        out.append(phase)
    return out


def _samples(t: RankTable, labels: list, table, kind: str, keep, pause: Callable[[], None] = no_pause) -> list[Family]:
    """One family per kept ``table`` row; a rank lacking the sample or the optional field is
    skipped. ``pause`` between families (a scrape's yield)."""
    fams = []
    for name, doc, kind_letter, field in table:
        if not keep(name):
            continue
        if fams:
            pause()
        fam = Family(name, doc, _KIND[kind_letter])
        fam.add_column(labels, t.field(kind, field))
        fams.append(fam)
    return fams


def _gpu_extra(t: RankTable, labels: list, full: bool) -> list[Family]:
    """Every clock event reason (0 or 1) and the ECC counters; summary mode: only the reasons
    active now (usually none; the throttling rules test == 1)."""
    active = Family("stepwatch_gpu_clock_event_active", "1 while the NVML clock event reason is active (summary "
                    "mode: only the active ones are exported).", "gauge")
    ecc = Family("stepwatch_gpu_ecc_errors", "Volatile ECC errors since the last driver reload.", "counter")
    reasons = t.raw("gpu_sample", "clock_event_reasons")
    if not full:
        for lab, bits in zip(labels, reasons):
            if bits:
                for reason, bit in CLOCK_EVENT_REASONS:
                    if bits & bit:
                        active.add(lab, 1, f'reason="{reason}"')
        return [active, ecc]
    corrected, uncorrected = t.raw("gpu_sample", "ecc_corrected_errors"), t.raw("gpu_sample", "ecc_uncorrected_errors")
    for lab, bits, c, u in zip(labels, reasons, corrected, uncorrected):
        if bits is not None:
            for reason, bit in CLOCK_EVENT_REASONS:
                active.add(lab, 1 if bits & bit else 0, f'reason="{reason}"')
        if c is not None:
            ecc.add(lab, c, 'type="corrected"')
        if u is not None:
            ecc.add(lab, u, 'type="uncorrected"')
    return [active, ecc]


def _agent(t: RankTable, labels: list, full: bool) -> list[Family]:
    connected = Family("stepwatch_agent_connected", "1 while the rank's agent is connected, 0 during the grace period.",
                       "gauge")
    info = Family("stepwatch_agent", "Versions reported by the rank's agent.", "info")
    stats = [Family(name, doc, "counter") for name, doc, _ in _STATS]
    spool = Family("stepwatch_agent_spool_bytes", "Bytes held in the agent's disk spool.", "gauge")
    events = Family("stepwatch_agent_events", "Agent events by kind (at most 32 kinds, then 'other').", "counter")
    connected.add_column(labels, [1 if n > 0 else 0 for n in t.streams])
    for fam, (_, _, field) in zip(stats, _STATS):
        fam.add_column(labels, t.raw("stats", field))
    if not full:
        return [connected, info, *stats, spool, events]
    spool.add_column(labels, t.raw("stats", "spool_bytes"))
    for lab, h, kinds in zip(labels, t.hello, t.event_counts):
        info.add(lab, 1, labels_text(("agent_version", "torch_version", "cuda_version", "driver_version"),
                                     (h.agent_version, h.torch_version, h.cuda_version, h.driver_version)))
        for kind, n in sorted(kinds.items()):
            events.add(lab, n, labels_text(("kind",), (kind,)))
    return [connected, info, *stats, spool, events]
