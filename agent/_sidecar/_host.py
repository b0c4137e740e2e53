"""Host sampler: psutil counters of the trainer process, on the "stepwatch-host" thread."""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Optional

import psutil

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ._batcher import Batcher
from ._log import LOG, OnceLog
from ._service import PeriodicService

__all__ = ["HostSampler", "trainer_alive"]


def trainer_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie (exited, not yet reaped)."""
    if pid <= 0:
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, but we may not look at it: assume alive


class HostSampler(PeriodicService):
    """Samples the trainer process into ``batcher`` ("host") when started, then every
    ``interval_s`` seconds.

    The sidecar itself (``own_pid``) is not counted among the trainer's children. Counters the
    platform or permissions do not allow (io_counters: AccessDenied) stay absent, logged once.
    """

    def __init__(self, batcher: Batcher, pid: int, interval_s: float, own_pid: Optional[int] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._batcher = batcher
        self._pid = pid
        self._own_pid = os.getpid() if own_pid is None else own_pid
        # The first sample at once: a job shorter than the interval still reports its process.
        super().__init__("stepwatch-host", interval_s, first_s=0.0)
        self._clock = clock
        self._proc: Optional[psutil.Process] = None
        self._io_ok = True
        self._once = OnceLog()

    def _tick(self) -> None:
        try:
            self._batcher.add("host", self.sample())
        except psutil.NoSuchProcess:
            self._once.log(logging.INFO, "gone", "trainer process %d is gone", self._pid)
        except Exception as exc:  # the loop never dies
            self._once.log(logging.WARNING, type(exc), "host sample failed: %r", exc)

    def sample(self) -> agent_pb2.HostSample:
        """One HostSample of the trainer; raises psutil.NoSuchProcess once it has exited."""
        if self._proc is None:
            self._proc = psutil.Process(self._pid)
        proc = self._proc
        with proc.oneshot():
            times = proc.cpu_times()
            sample = agent_pb2.HostSample(
                time_s=self._clock(),
                cpu_seconds=times.user + times.system,
                resident_memory_bytes=proc.memory_info().rss,
                threads=proc.num_threads(),
                children=sum(1 for c in proc.children(recursive=True) if c.pid != self._own_pid))
            self._io(proc, sample)
        sample.host_memory_available_bytes = psutil.virtual_memory().available
        return sample

    def _io(self, proc: psutil.Process, sample: agent_pb2.HostSample) -> None:
        if not self._io_ok:
            return
        try:
            io = proc.io_counters()
        except (psutil.AccessDenied, AttributeError, NotImplementedError) as exc:
            self._io_ok = False
            LOG.info("trainer I/O counters unavailable: %r", exc)
            return
        sample.io_read_bytes = io.read_bytes
        sample.io_write_bytes = io.write_bytes
