"""NVML sampler: counters of the trainer's GPU, read on the sidecar's own thread.

All NVML calls happen on the "stepwatch-nvml" daemon thread: NVML serializes on the driver and
some queries take milliseconds. A missing library or driver emits one ``nvml_unavailable``
Event and stops the sampler; a query that fails once (NotSupported or any other error) is
disabled with one log line and one ``nvml_query_unsupported`` Event.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ._batcher import Batcher
from ..contract import normalize_uuid
from ._thread import PeriodicService
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


def _load_pynvml() -> Any:
    import pynvml  # noqa: PLC0415 - optional at run time; absence is reported, not fatal
    return pynvml


class NvmlSampler(PeriodicService):
    """Samples the trainer's GPU every ``interval_s`` seconds into ``batcher`` ("gpu_sample").

    ``load`` returns the pynvml module (a seam for tests); ``clock`` returns Unix seconds.
    ``ready`` is set once initialization was attempted; ``driver_version`` is "" until then
    or without NVML. Nothing is sampled until :meth:`set_gpu` named the trainer's device.
    """

    def __init__(self, batcher: Batcher, interval_s: float, load: Callable[[], Any] = _load_pynvml,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__("stepwatch-nvml", interval_s)
        self._batcher = batcher
        self._load = load
        self._clock = clock
        self._nv: Any = None
        self._uuid: Optional[str] = None
        self._handle: Any = None
        self._handle_uuid: Optional[str] = None
        self._disabled: set = set()
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
        return sample

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
            try:
                self._handle = self._nv.nvmlDeviceGetHandleByUUID(uuid)
            except Exception as exc:
                detail = f"{uuid}: {type(exc).__name__}: {exc}"
                LOG.warning("NVML cannot find the trainer's GPU %s", detail)
                self._batcher.event("nvml_device_not_found", detail)
        return self._handle
