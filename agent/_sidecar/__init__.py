"""The agent sidecar: one process per training rank, spawned by ``attach()``.

It reads newline-delimited JSON records from its stdin (see :mod:`._records`), samples NVML
and psutil counters of the trainer, seals the records into sequenced ``Batch`` messages every
``flush_interval_s``, spools each batch on disk and streams it to the collector over gRPC,
forgetting a batch only once the collector acknowledged it. It analyses the profiler windows
the trainer exports (:mod:`._analysis`, on a worker thread), archives traces captured on
command (:mod:`._traces`), and answers the trainer on its stdout (:mod:`._backchannel`:
window results, capture requests from the collector). It never imports torch.

Run as ``python -m stepwatch.agent._sidecar``; the first stdin line must be the config.
"""

from ._config import ConfigError, SidecarConfig
from ._sidecar import Sidecar

__all__ = ["ConfigError", "Sidecar", "SidecarConfig"]
