"""Detection in the collector: feeds applied batches to the DetectionEngine, runs the
evaluation tick, keeps the AlertBook and hands changes to the Alertmanager client.

Everything runs on the event loop thread: ``write_batch`` is called by the ingest handler for
each applied batch (through :class:`Tee`, which also feeds the recorder), ``tick`` by an asyncio
task every ``eval_interval_s``. A failure inside detection is logged (once per kind of error)
and never reaches ingest.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ._alertmanager import AlertmanagerClient
from ._alerts import Alert, AlertBook
from .detect import AllocatorPoint, DetectionConfig, DetectionEngine, GpuPoint, HostPoint

__all__ = ["Alerting", "Tee", "feed_batch"]

log = logging.getLogger("stepwatch.collector")


def _opt(msg, name):
    return getattr(msg, name) if msg.HasField(name) else None


def feed_batch(engine: DetectionEngine, job: str, rank: int, batch: agent_pb2.Batch) -> None:
    """Hand one batch's step, allocator, NVML and host samples to ``engine``."""
    for r in batch.steps:
        engine.step(job, rank, r.step, r.end_time_s, r.duration_s, _opt(r, "tokens"), r.dataloader_wait_s)
    for a in batch.allocator:
        engine.allocator(job, rank, AllocatorPoint(a.time_s, a.allocated_bytes, a.reserved_bytes,
                                                   a.inactive_split_bytes, a.alloc_retries, a.ooms,
                                                   a.device_total_bytes))
    for g in batch.gpu_samples:
        engine.gpu(job, rank, GpuPoint(g.time_s, _opt(g, "memory_used_bytes"), _opt(g, "memory_total_bytes"),
                                       _opt(g, "clock_event_reasons"), _opt(g, "sm_clock_hertz"),
                                       _opt(g, "temperature_celsius")))
    for h in batch.host:
        engine.host(job, rank, HostPoint(h.time_s, h.resident_memory_bytes), _opt(h, "host_memory_available_bytes"))


class Alerting:
    """``clock`` gives Unix seconds. ``alertmanager_url`` empty: alerts stay local (metric, API)."""

    def __init__(self, cfg: DetectionConfig, clock: Callable[[], float], *, connections=lambda: (),
                 alertmanager_url: str = "",
                 alertmanager_timeout_s: float = 5.0, alertmanager_retries: int = 5,
                 alertmanager_resend_s: float = 60.0, generator_url: str = ""):
        self.cfg, self.clock = cfg, clock
        self.engine = DetectionEngine(cfg)
        self._connections = connections
        self.book = AlertBook(cfg.resolved_retention_s)
        self.client = AlertmanagerClient(alertmanager_url, timeout_s=alertmanager_timeout_s,
                                         retries=alertmanager_retries, resend_s=alertmanager_resend_s,
                                         clock=clock, generator_url=generator_url) if alertmanager_url else None
        self._task: Optional[asyncio.Task] = None
        self._last_resend = 0.0
        self._errors: set = set()

    def write_batch(self, job: str, rank: int, session: str, batch: agent_pb2.Batch) -> None:
        try:
            feed_batch(self.engine, job, rank, batch)
            if self.engine.changed:
                self._update()
        except Exception as exc:  # noqa: BLE001 - detection must never break ingest
            self._log_once(exc)

    def forget(self, keys) -> None:
        for job, rank in keys:
            self.engine.forget(job, rank)

    def _update(self) -> list[Alert]:
        self.engine.changed = False
        changes = self.book.update(self.clock(), self.engine.conditions())
        for a in changes:
            log.warning("stepwatch alert %s %s: %s job=%s rank=%d: %s", a.state, a.severity, a.alertname,
                        a.job, a.rank, a.summary)
        if self.client is not None and changes:
            self.client.submit(changes)
        return changes

    def tick(self, connections=None) -> None:
        """Time-based rules, `for` durations, periodic resend of firing alerts.

        ``connections``: ``(job, rank, connected, disconnected_at)`` of every rank the collector
        still holds; ranks absent from it (expired) are forgotten. None: leave ranks as they are.
        """
        now = self.clock()
        if connections is not None:
            for job, rank, connected, since in connections:
                self.engine.connection(job, rank, connected, since)
            self.forget(self.engine.rank_keys() - {(c[0], c[1]) for c in connections})
        self.engine.tick(now)
        self._update()
        if self.client is not None and now - self._last_resend >= self.client.resend_s:
            self._last_resend = now
            self.client.submit(self.book.firing())

    def start(self) -> None:
        if self.client is not None:
            self.client.start()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="stepwatch-detect")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.client is not None:
            await self.client.stop()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.eval_interval_s)
            try:
                self.tick(self._connections())
            except Exception as exc:  # noqa: BLE001 - the loop must outlive one bad tick
                self._log_once(exc)

    def _log_once(self, exc: Exception) -> None:
        kind = (type(exc).__name__, str(exc)[:80])
        if kind not in self._errors:
            self._errors.add(kind)
            log.exception("stepwatch collector: detection failed (further identical errors not logged)")


class Tee:
    """Stands where the ingest server expects a recorder: feeds detection, then the recorder."""

    def __init__(self, alerting: Alerting, recorder=None):
        self._alerting, self._recorder = alerting, recorder

    def write_batch(self, job: str, rank: int, session: str, batch: agent_pb2.Batch) -> None:
        self._alerting.write_batch(job, rank, session, batch)
        if self._recorder is not None:
            self._recorder.write_batch(job, rank, session, batch)

    def close(self) -> None:
        if self._recorder is not None:
            self._recorder.close()
