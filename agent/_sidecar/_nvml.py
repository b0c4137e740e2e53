"""NVML sampler: counters of the trainer's GPU, read on the sidecar's own thread.

All NVML calls happen on the "stepwatch-nvml" daemon thread: NVML serializes on the driver and
some queries take milliseconds. A missing library or driver emits one ``nvml_unavailable``
Event and stops the sampler; a query that fails once (NotSupported or any other error) is
disabled with one log line and one ``nvml_query_unsupported`` Event.

GPM device counters (SM activity and occupancy, tensor and FP pipes, DRAM bandwidth, PCIe and
NVLink traffic; Hopper and newer) come from two GPM samples one interval apart: the first
sample after start yields none. A GPU without GPM support gives one ``nvml_gpm_unsupported``
Event saying why, and the counters are absent.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Callable, Dict, Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ._batcher import Batcher
from stepwatch.core.contract import normalize_uuid
from ._service import PeriodicService
from ._log import LOG, OnceLog

__all__ = ["NvmlSampler", "QUERIES"]

SLOW_SAMPLE_S = 5.0


def _utilization(nv: Any, h: Any) -> Dict[str, float]:
    u = nv.nvmlDeviceGetUtilizationRates(h)
    return {"utilization_ratio": u.gpu / 100.0, "memory_utilization_ratio": u.memory / 100.0}


def _memory(nv: Any, h: Any) -> Dict[str, int]:
    m = nv.nvmlDeviceGetMemoryInfo(h)
    return {"memory_used_bytes": int(m.used), "memory_total_bytes": int(m.total)}


def _clock_reasons(nv: Any, h: Any) -> Dict[str, int]:
    query = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return {"clock_event_reasons": int(query(h))}


def _ecc(nv: Any, h: Any) -> Dict[str, int]:
    def total(kind: int) -> int:
        return int(nv.nvmlDeviceGetTotalEccErrors(h, kind, nv.NVML_VOLATILE_ECC))
    return {"ecc_corrected_errors": total(nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            "ecc_uncorrected_errors": total(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)}


# Query name -> function(nvml module, handle) -> {GpuSample field: value in base units}.
QUERIES: Dict[str, Callable[[Any, Any], Dict[str, Any]]] = {
    "utilization": _utilization,
    "memory": _memory,
    "power": lambda nv, h: {"power_watts": nv.nvmlDeviceGetPowerUsage(h) / 1000.0},
    "energy": lambda nv, h: {"energy_joules": nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0},
    "temperature": lambda nv, h: {
        "temperature_celsius": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))},
    "sm_clock": lambda nv, h: {"sm_clock_hertz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) * 1e6},
    "memory_clock": lambda nv, h: {
        "memory_clock_hertz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM) * 1e6},
    "clock_event_reasons": _clock_reasons,
    "ecc": _ecc,
}


_MIB = float(1 << 20)
# (pynvml metric id constant, GpuSample field, scale to base units). GPM gives percentages and
# MiB/s.
GPM_METRICS = (
    ("NVML_GPM_METRIC_SM_UTIL", "sm_active_ratio", 0.01),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", "sm_occupancy_ratio", 0.01),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor_active_ratio", 0.01),
    ("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", "tensor_hmma_active_ratio", 0.01),
    ("NVML_GPM_METRIC_IMMA_TENSOR_UTIL", "tensor_imma_active_ratio", 0.01),
    ("NVML_GPM_METRIC_DMMA_TENSOR_UTIL", "tensor_dmma_active_ratio", 0.01),
    ("NVML_GPM_METRIC_FP16_UTIL", "fp16_active_ratio", 0.01),
    ("NVML_GPM_METRIC_FP32_UTIL", "fp32_active_ratio", 0.01),
    ("NVML_GPM_METRIC_FP64_UTIL", "fp64_active_ratio", 0.01),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", "dram_active_ratio", 0.01),
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", "pcie_tx_bytes_per_second", _MIB),
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", "pcie_rx_bytes_per_second", _MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "nvlink_tx_bytes_per_second", _MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "nvlink_rx_bytes_per_second", _MIB),
)


class GpmUnsupported(Exception):
    """The device (or driver, or pynvml) offers no GPM counters; the message says why."""


class GpmReader:
    """GPM counters of one device between consecutive :meth:`read` calls (sampler thread)."""

    def __init__(self, nv: Any, handle: Any) -> None:
        if not hasattr(nv, "nvmlGpmQueryDeviceSupport"):
            raise GpmUnsupported("this pynvml has no GPM API (nvidia-ml-py >= 12.535 has)")
        try:
            supported = nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice
        except Exception as exc:
            raise GpmUnsupported(f"GPM support query failed: {type(exc).__name__}: {exc}") from None
        if not supported:
            raise GpmUnsupported("the GPU does not support GPM (needs Hopper or newer, not a MIG slice)")
        self._nv, self._handle = nv, handle
        self._metrics = [(getattr(nv, const), field, scale) for const, field, scale in GPM_METRICS
                         if hasattr(nv, const)]
        self._prev = nv.nvmlGpmSampleGet(handle, nv.nvmlGpmSampleAlloc())
        self._next = nv.nvmlGpmSampleAlloc()
        self.unsupported: list[str] = []  # fields the device does not report (set by read)

    def read(self) -> Dict[str, float]:
        nv = self._nv
        nv.nvmlGpmSampleGet(self._handle, self._next)
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(self._metrics)
        get.sample1, get.sample2 = self._prev, self._next
        for i, (metric_id, _, _) in enumerate(self._metrics):
            get.metrics[i].metricId = metric_id
        nv.nvmlGpmMetricsGet(get)
        self._prev, self._next = self._next, self._prev
        out, missing = {}, []
        for i, (_, field, scale) in enumerate(self._metrics):
            m = get.metrics[i]
            if m.nvmlReturn == 0 and math.isfinite(m.value) and m.value >= 0:
                out[field] = m.value * scale
            else:
                missing.append(field)
        self.unsupported = missing
        return out

    def close(self) -> None:
        for sample in (self._prev, self._next):
            try:
                self._nv.nvmlGpmSampleFree(sample)
            except Exception:
                pass


def _load_pynvml() -> Any:
    import pynvml  # noqa: PLC0415 - optional at run time; absence is reported, not fatal
    return pynvml


class NvmlSampler(PeriodicService):
    """Samples the trainer's GPU every ``interval_s`` seconds into ``batcher`` ("gpu_sample").

    ``load`` returns the pynvml module (a seam for tests); ``clock`` returns Unix seconds;
    ``gpm`` False leaves the GPM counters out.
    ``ready`` is set once initialization was attempted; ``driver_version`` is "" until then
    or without NVML. Nothing is sampled until :meth:`set_gpu` named the trainer's device.
    """

    def __init__(self, batcher: Batcher, interval_s: float, load: Callable[[], Any] = _load_pynvml,
                 clock: Callable[[], float] = time.time, gpm: bool = True) -> None:
        super().__init__("stepwatch-nvml", interval_s)
        self._batcher = batcher
        self._load = load
        self._clock = clock
        self._nv: Any = None
        self._uuid: Optional[str] = None
        self._handle: Any = None
        self._handle_uuid: Optional[str] = None
        self._disabled: set = set() if gpm else {"gpm"}
        self._gpm: Optional[GpmReader] = None
        self._gpm_missing_told = False
        self._once = OnceLog()
        self.ready = threading.Event()
        self.available = False
        self.driver_version = ""

    def set_gpu(self, uuid: str) -> None:
        """The trainer's GPU (any thread); the handle is looked up on the sampler thread."""
        self._uuid = normalize_uuid(uuid) or None
        if self.ready.is_set() and not self.available:
            self._once.log(logging.WARNING, "gpu_without_nvml",
                           "trainer uses GPU %s but NVML is unavailable: no GPU counters", uuid)

    def init(self) -> bool:
        """Load and initialize NVML once; on failure emit ``nvml_unavailable``. Sampler thread."""
        try:
            nv = self._load()
            nv.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
            reason = f"{type(exc).__name__}: {exc}"
            LOG.info("NVML unavailable, no GPU counters: %s", reason)
            self._batcher.event("nvml_unavailable", reason)
            return False
        self._nv, self.available = nv, True
        try:
            version = nv.nvmlSystemGetDriverVersion()
            self.driver_version = version.decode() if isinstance(version, bytes) else str(version)
        except Exception as exc:
            LOG.info("NVML driver version unavailable: %s", exc)
        return True

    def _setup(self) -> bool:
        try:
            return self.init()
        finally:
            self.ready.set()

    def _tick(self) -> None:
        started = time.monotonic()
        try:
            sample = self.sample()
        except Exception as exc:  # the loop never dies
            self._once.log(logging.WARNING, ("sample", type(exc)), "NVML sample failed: %s", exc)
            sample = None
        if sample is not None:
            self._batcher.add("gpu_sample", sample)
        self._watchdog(time.monotonic() - started)

    def _watchdog(self, elapsed: float) -> None:
        if elapsed > SLOW_SAMPLE_S:
            LOG.warning("NVML sample took %.1f s (> %.0f s): the driver is slow or stuck",
                        elapsed, SLOW_SAMPLE_S)

    def _teardown(self) -> None:
        if self._gpm is not None:
            self._gpm.close()
        try:
            self._nv.nvmlShutdown()
        except Exception:
            pass

    def sample(self) -> Optional[agent_pb2.GpuSample]:
        """One GpuSample of the trainer's GPU, or None while it is unknown or not found.
        Sampler thread only (after :meth:`init` succeeded)."""
        handle = self._device()
        if handle is None:
            return None
        sample = agent_pb2.GpuSample(time_s=self._clock())
        for name, query in QUERIES.items():
            if name in self._disabled:
                continue
            try:
                for field, value in query(self._nv, handle).items():
                    setattr(sample, field, value)
            except Exception as exc:
                self._disable(name, exc)
        if "gpm" not in self._disabled:
            try:
                for field, value in self._gpm_values(handle).items():
                    setattr(sample, field, value)
            except Exception as exc:
                self._disable("gpm", exc)
        return sample

    def _gpm_values(self, handle: Any) -> Dict[str, float]:
        """GPM counters since the previous sample ({} on the first one)."""
        if self._gpm is None:
            try:
                self._gpm = GpmReader(self._nv, handle)
            except GpmUnsupported as exc:
                self._disabled.add("gpm")
                LOG.info("no GPM device counters: %s", exc)
                self._batcher.event("nvml_gpm_unsupported", str(exc))
                return {}
            return {}
        values = self._gpm.read()
        if self._gpm.unsupported and not self._gpm_missing_told:
            self._gpm_missing_told = True
            self._batcher.event("nvml_gpm_unsupported", "GPM metrics not reported by this GPU: "
                                + ", ".join(self._gpm.unsupported))
        return values

    def _disable(self, name: str, exc: Exception) -> None:
        self._disabled.add(name)
        detail = f"{name}: {type(exc).__name__}: {exc}"
        LOG.info("NVML query disabled after failure: %s", detail)
        self._batcher.event("nvml_query_unsupported", detail)

    def _device(self) -> Any:
        """The cached handle of the trainer's GPU, looked up by UUID when it changed."""
        uuid = self._uuid
        if uuid is None:
            return None
        if uuid != self._handle_uuid:
            self._handle_uuid, self._handle = uuid, None
            if self._gpm is not None:
                self._gpm.close()
                self._gpm = None
            try:
                self._handle = self._nv.nvmlDeviceGetHandleByUUID(uuid)
            except Exception as exc:
                detail = f"{uuid}: {type(exc).__name__}: {exc}"
                LOG.warning("NVML cannot find the trainer's GPU %s", detail)
                self._batcher.event("nvml_device_not_found", detail)
        return self._handle
