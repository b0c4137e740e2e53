"""The collector service: gRPC ingest + HTTP export + one housekeeping tick in one asyncio process.

The data path, top to bottom (see :mod:`._pipeline`)::

    IngestServer --connect/batch/disconnect--> Pipeline
        -> CollectorState (per-rank state, read by /metrics, /api and the page)
        -> Detection (detectors -> AlertBook -> AlertmanagerClient)
        -> Recorder (the ``record`` file; optional)
    housekeeping task, every tick: expire -> forget -> detect

``Collector`` methods are coroutines run on one event loop; ``run`` owns that loop for the CLI.
Teardown is the reverse of start-up: stop ingest (with a grace period), stop HTTP, cancel the
housekeeping task, stop the Alertmanager client, then close the recorder.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from typing import Callable, Optional

from prometheus_client import CollectorRegistry

from stepwatch.proto.stepwatch.v1 import agent_pb2

from . import _gcstats as gcstats
from . import grpc_fork_handlers_off as _fork_handlers_off
from ._config import CollectorSettings
from .alerting import AlertmanagerClient, AlertMetrics, Detection
from .api import HttpServer, Routes, accepts, ssl_context, tls_files
from .detect import DriftStore, RunStore
from .export import Declared, ForkRender, RankMetrics, Scrape, available as fork_available, connected_families, cores
from .ingest import AcceptGuard, IngestServer, Pipeline, Recorder, raise_fd_limit
from .state import CollectorHealth, CollectorState, TraceStore, TraceStoreMetrics

__all__ = ["Collector", "run"]

log = logging.getLogger("stepwatch.collector")
LOOP_WATCH_S = 0.1  # the event-loop lag timer (_loop_watch)


def _split(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def resolve_render(setting: str, grpc_fork_handlers_off: Optional[bool] = None) -> str:
    """metrics_render as it will run: ``auto`` is process where fork() exists, the collector
    may use 2 or more cores (on one core a forked render only competes with ingest:
    bench/results/collector_scale_h100host_render.md) and gRPC loaded with its fork handlers
    off (the ``stepwatch`` command sees to it before gRPC loads); else thread."""
    if setting != "auto":
        return setting
    if grpc_fork_handlers_off is None:
        grpc_fork_handlers_off = _fork_handlers_off()
    return "process" if fork_available() and grpc_fork_handlers_off and cores() >= 2 else "thread"


class Collector:
    """One collector. ``clock`` gives Unix seconds (injected for tests); ``registry`` defaults to a
    new private CollectorRegistry (never the global one). ``process_wide``: the process is the
    collector's own, so it may install the garbage-collection hooks and freezing
    (``gc_full_every_s``) and set the thread switch interval (``gil_switch_interval_s``); off,
    building and running a collector changes no state of the process it is embedded in.

    After ``await start()``: ``grpc_address`` and ``http_address`` are ``"HOST:PORT"`` with the
    bound ports; ``state``, ``pipeline`` and ``registry`` are the live objects. ``stop`` is
    idempotent.
    """

    def __init__(self, settings: CollectorSettings, *, clock: Callable[[], float] = time.time,
                 registry: Optional[CollectorRegistry] = None, process_wide: bool = False):
        self.settings, self.clock = settings, clock
        # What belongs to the process, not to one collector (the garbage collector's hooks and
        # freezing, the thread switch interval) is changed only when the process is the
        # collector's own (`stepwatch collector` passes process_wide=True).
        self.process_wide = process_wide
        if process_wide:
            gcstats.install()
        self.gc = gcstats.GcFreezer(settings.gc_full_every_s if process_wide else 0.0)
        self.state = CollectorState(settings.agent_grace_s, windows_kept=settings.windows_kept)
        self.health = CollectorHealth()
        client = AlertmanagerClient.from_settings(settings, clock) if settings.alertmanager_url else None
        # Each rank's settled level, noise and open drift episode survive a restart in state_dir.
        self._store = DriftStore(settings.state_dir) if settings.state_dir else None
        # Each job's runs (their levels, what they ran on) beside it, in memory without a state_dir.
        self._runs = RunStore(settings.state_dir or None, settings.detection.runs.keep)
        self.detection = Detection(settings.detection, client, request_window=self._request_window,
                                   request_trace=self._request_trace, store=self._store, runs=self._runs)
        self.pipeline = Pipeline(self.state, [self.detection], self.health.ingest)
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.rank_metrics = RankMetrics(self.state, settings.metrics_per_rank, settings.metrics_top_k)
        self.render_mode = resolve_render(settings.metrics_render)
        self._fork = ForkRender() if self.render_mode == "process" else None
        # every component's own families are the registry's (the ranks' series: RankMetrics)
        for source in (lambda: connected_families(self.state), self.health.ingest.families,
                       self.health.families, gcstats.GC_STATS.families) + ((self._fork.families,) if self._fork else ()):
            Declared(source).register(self.registry)
        AlertMetrics(self.detection.book, self.registry, client, pauses=self.detection.engine.pauses,
                     runs=self.detection.engine.lineage.ratios, arming=self.detection.engine.arming,
                     per_rank=settings.metrics_per_rank == "full", armed=self.detection.engine.armed,
                     reach=self.detection.engine.reach,
                     store_failures=lambda: (self._store.failures if self._store is not None else 0) + self._runs.failures)
        self.routes = Routes(self.state, self.health, self.detection.engine, self.detection.book.json,
                             lambda: self.trace_store)
        self.scrape = Scrape(self.registry, self.rank_metrics, self.health, self._fork, self.state.lock, accepts)
        self.grpc_address: Optional[str] = None
        self.http_address: Optional[str] = None
        self._recorder: Optional[Recorder] = None
        self._owned_trace_dir: Optional[str] = None  # made by this collector, removed at stop
        self.trace_store: Optional[TraceStore] = None
        self._ingest: Optional[IngestServer] = None
        self._http: Optional[HttpServer] = None
        self._housekeeping: Optional[asyncio.Task] = None
        self._gc_task: Optional[asyncio.Task] = None
        self._watch_task: Optional[asyncio.Task] = None
        self._switch_interval: Optional[float] = None  # Python's, while ours is set
        self._stopped = False

    @property
    def tick_s(self) -> float:
        """Seconds between housekeeping ticks: the detection interval, and often enough that a
        gone rank expires within a quarter of its grace period (at least every 0.5 s)."""
        return max(0.5, min(self.settings.detection.eval_interval_s, self.settings.agent_grace_s / 4))

    async def start(self) -> None:
        """Open the record file, bind gRPC then HTTP, start housekeeping and the Alertmanager client.

        Raises RuntimeError (bind failure) or OSError (record file); on failure everything
        already started is stopped again.
        """
        try:
            if self.settings.record:
                self._recorder = Recorder(self.settings.record)
                self.pipeline.listeners.append(self._recorder)
            if self.settings.trace_store_dir:
                self._open_trace_store(self.settings.trace_store_dir)
            self._ingest = IngestServer(self.pipeline, collector_health=self.health, auth_token=self.settings.auth_token,
                                        max_message_bytes=self.settings.max_message_bytes, clock=self.clock,
                                        store=self.trace_store, max_jobs=self.settings.max_jobs,
                                        max_ranks_per_job=self.settings.max_ranks_per_job,
                                        tls=tls_files(self.settings), control_token=self.settings.control_token,
                                        capture_every_s=self.settings.capture_every_s,
                                        max_batches_per_s=self.settings.max_batches_per_s)
            grpc_host, _ = _split(self.settings.grpc_listen)
            self.grpc_address = f"{grpc_host}:{await self._ingest.start(self.settings.grpc_listen)}"
            await self._start_http()
        except BaseException:
            await self.stop(grace_s=0)
            raise
        self._start_tasks()
        log.info("stepwatch collector: gRPC on %s; the page http://%s/, metrics http://%s/metrics (rendered on the %s)",
                 self.grpc_address, self.http_address, self.http_address,
                 "render process" if self._fork is not None else "HTTP thread")

    def _open_trace_store(self, directory: str) -> None:
        if directory == "auto":  # this collector's own, never another user's or collector's
            directory = self._owned_trace_dir = tempfile.mkdtemp(prefix="stepwatch-collector-traces-")
        self.trace_store = TraceStore(directory, self.settings.trace_store_max_bytes,
                                      self.settings.trace_upload_max_bytes)
        TraceStoreMetrics(self.trace_store, self.registry)

    async def _start_http(self) -> None:
        http_host, http_port = _split(self.settings.http_listen)
        self._http = self.routes.server(self.scrape, self.settings.http_token,
                                        self.settings.http_nice if self.process_wide else 0)
        self.http_address = f"{http_host}:{await self._http.start(http_host, http_port, ssl_context(self.settings))}"
        self.health.http_cut_off = lambda: self._http.cut_off

    def _start_tasks(self) -> None:
        """The Alertmanager client, housekeeping, the loop watch, the GC pacer; the switch
        interval when this collector is the process's own."""
        if self.detection.client is not None:
            self.detection.client.start()
        self._housekeeping = asyncio.get_running_loop().create_task(self._housekeeping_loop(),
                                                                    name="stepwatch-housekeeping")
        self._watch_task = asyncio.get_running_loop().create_task(self._loop_watch(), name="stepwatch-loop-watch")
        if self.gc.every_s:
            self._gc_task = asyncio.get_running_loop().create_task(self._gc_loop(), name="stepwatch-gc")
        if self.process_wide and self.settings.gil_switch_interval_s and self._switch_interval is None:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(self.settings.gil_switch_interval_s)

    async def stop(self, grace_s: float = 2.0) -> None:
        """Stop ingest (live streams are cancelled after ``grace_s`` s), HTTP, housekeeping, the
        Alertmanager client; close the recorder."""
        if self._stopped:
            return
        self._stopped = True
        if self._ingest is not None:
            await self._ingest.stop(grace_s)
        if self._http is not None:
            await self._http.stop()
        for task in (self._housekeeping, self._gc_task, self._watch_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.detection.client is not None:
            await self.detection.client.stop()
        if self._recorder is not None:
            self._recorder.close()
        if self._store is not None:
            try:  # (every rank's state as it is now: a restart then misses none of it)
                self.detection.engine.save(self.clock(), force=True)
            except Exception:  # noqa: BLE001 - stopping must finish; what was saved before stands
                log.exception("stepwatch collector: saving the detection state at stop failed")
            self._store.close()
        self._runs.close()
        if self._owned_trace_dir is not None:
            shutil.rmtree(self._owned_trace_dir, ignore_errors=True)
            self._owned_trace_dir = None
        self.gc.stop()
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None

    def _request_window(self, job: str, rank: int, reason: str) -> bool:
        """Ask a connected rank for a profiler window at its next step (a slowdown fired)."""
        stream = self._ingest.streams.live(job).get(rank) if self._ingest is not None else None
        sent = stream is not None and stream.send(
            agent_pb2.Command(window_now=agent_pb2.WindowNow(reason=reason)))
        log.info("stepwatch collector: %s window of job=%s rank=%d for %s",
                 "asked for a" if sent else "could not ask for a", job, rank, reason)
        return sent

    def _request_trace(self, job: str, rank: int, steps: int) -> Optional[str]:
        """Ask a connected rank for a full trace of its next ``steps`` steps; the request id."""
        stream = self._ingest.streams.live(job).get(rank) if self._ingest is not None else None
        request_id = f"alert-{uuid.uuid4().hex[:16]}"
        command = agent_pb2.Command(capture_trace=agent_pb2.CaptureTrace(request_id=request_id, steps=steps))
        if stream is None or not stream.send(command):
            return None
        self.state.traces.open(request_id, job, steps, [rank], self.clock())
        log.info("stepwatch collector: trace %s of job=%s rank=%d (%d steps) after a slowdown alert",
                 request_id, job, rank, steps)
        return request_id

    def housekeeping(self) -> list:
        """One tick at ``clock()``: expire -> forget -> detect; returns the expired (job, rank) keys."""
        return self.pipeline.housekeeping(self.clock())

    async def _gc_loop(self) -> None:
        """The garbage collector's tick (:class:`~._gcstats.GcFreezer`): every second, so what
        a full collection walks between freezes stays one second's worth of survivors."""
        while True:
            await asyncio.sleep(gcstats.TICK_S)
            try:
                ingest = self.health.ingest
                self.gc.tick(ingest["streams_accepted"] + sum(ingest["streams_rejected"].values()))
            except Exception:  # noqa: BLE001 - as housekeeping
                log.exception("stepwatch collector: garbage-collector tick failed")

    async def _housekeeping_loop(self) -> None:
        """A tick every ``tick_s``, in slices (:meth:`Pipeline.housekeeping_slices`) with the
        loop free between them; ``stepwatch_collector_housekeeping_seconds`` observes the time
        the tick held the loop (its slices together)."""
        while True:
            await asyncio.sleep(self.tick_s)
            held = 0.0
            try:
                slices = self.pipeline.housekeeping_slices(self.clock())
                while True:
                    started = time.perf_counter()
                    try:
                        next(slices)
                    except StopIteration:
                        break
                    finally:
                        held += time.perf_counter() - started
                    await asyncio.sleep(0)
            except Exception:  # noqa: BLE001 - the loop must outlive one bad tick
                log.exception("stepwatch collector: housekeeping failed")
            self.health.housekeeping.observe(held)

    async def _loop_watch(self) -> None:
        """How late the event loop wakes a LOOP_WATCH_S timer, into ``state.loop_lag``
        (stepwatch_collector_loop_lag_seconds): an ack waits that long on top of its own work."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + LOOP_WATCH_S
            await asyncio.sleep(LOOP_WATCH_S)
            self.health.loop_lag.observe(max(0.0, loop.time() - due))
            self.health.load.sample()

def _write_ready_file(path: str, collector: Collector) -> None:
    """Write ``{"grpc", "http", "pid"}`` atomically (tmp file, then rename)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"grpc": collector.grpc_address, "http": collector.http_address, "pid": os.getpid()}, fh)
    os.replace(tmp, path)


async def _serve(settings: CollectorSettings, ready_file: Optional[str]) -> None:
    collector = Collector(settings, process_wide=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(AcceptGuard(collector.health.ingest.accept_failed))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await collector.start()
    try:
        if ready_file:
            _write_ready_file(ready_file, collector)
        await stop.wait()
        log.info("stepwatch collector: shutting down")
    finally:
        await collector.stop()


def run(settings: CollectorSettings, ready_file: Optional[str] = None) -> int:
    """Run a collector until SIGTERM or SIGINT, then stop gracefully; return the exit code.

    Main thread only (signal handlers). Bind or record-file failures are logged and give 1.
    """
    raise_fd_limit()
    try:
        asyncio.run(_serve(settings, ready_file))
    except (RuntimeError, OSError) as exc:
        log.error("stepwatch collector: %s", exc)
        return 1
    return 0
