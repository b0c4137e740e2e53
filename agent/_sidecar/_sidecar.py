"""The sidecar service: wires reader, samplers, batcher, spool and sender together.

Every part is a :class:`~._service.Service` with its own daemon thread, started in the order
sender, back channel, trace archiver, window analysis, flusher, host sampler, NVML sampler,
reader (consumers before producers) and stopped in the reverse order, so each part's last
output still has a consumer: samplers stop, queued windows and traces are finished, the
flusher seals the last batch, the sender delivers it. The caller's thread waits in
:meth:`Sidecar.run`.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
from typing import Iterable, Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core import contract
from ._backchannel import BackChannel
from ._batcher import Batcher
from ._config import SidecarConfig
from ._host import HostSampler, trainer_alive
from ._log import LOG, OnceLog
from ._nvml import NvmlSampler
from ._pacing import paced_interval, seal_due
from ._reader import Reader
from ._records import Record
from ._sender import Sender
from ._spool import LOG_FILE, Spool, orphans, spool_path
from ._service import PeriodicService
from ._traces import TraceArchive
from ._upload import TraceUploader
from ._window_jobs import TraceJobs, WindowJobs

__all__ = ["Sidecar"]

_LIVENESS_EVERY_S = 1.0
_ADOPT_EVERY_S = 30.0  # look for spools earlier sessions left this often
_HELLO_WAIT_S = 2.0


class Sidecar:
    """One rank's sidecar. :meth:`run` returns after EOF, "bye", or :meth:`request_stop`
    (SIGTERM), once the last batch was sealed and the sender was given ``shutdown_timeout_s``
    to deliver it. :meth:`shutdown` is idempotent and safe to call from atexit.

    ``channel`` is the back channel to the trainer (the sidecar's stdout, see
    :mod:`._backchannel`); None discards its messages."""

    def __init__(self, config: SidecarConfig, stdin: Iterable[bytes],
                 nvml: Optional[NvmlSampler] = None,
                 channel: Optional[BackChannel] = None) -> None:
        self.config = config
        hello, s = config.hello, config.settings
        tls = {"tls": s.tls, "ca": s.tls_ca, "cert": s.tls_cert, "key": s.tls_key}
        self.spool = Spool(spool_path(s.spool_dir, hello.job, hello.rank, hello.session_id),
                           s.spool_max_bytes)
        self.batcher = Batcher(first_seq=self.spool.max_seq + 1)
        self.nvml = nvml or NvmlSampler(self.batcher, s.nvml_interval_s, gpm=s.nvml_gpm)
        self.host = HostSampler(self.batcher, config.trainer_pid, s.host_interval_s)
        self.channel = channel or BackChannel(None)
        self.windows = WindowJobs(self.batcher, self.channel, s.window_top_k)
        self.traces = TraceJobs(self.batcher, TraceArchive(
            s.trace_dir, hello.job, hello.rank, s.trace_max_bytes, s.trace_max_files),
            uploader=TraceUploader(s.collector, s.token, hello.job, hello.rank, tls=tls) if s.trace_upload else None)
        self.sender = Sender(s.collector, self.spool, self._hello, token=s.token, tls=tls,
                             reconnect_max_s=s.reconnect_max_s,
                             on_command=self._on_command)
        self.spool.claim(os.getpid(), hello.SerializeToString())
        self._tls = tls
        self.leftovers: list = []  # Senders delivering spools earlier sessions left (adopt_leftovers)
        self._leftover_paths: set = set()
        self.reader = Reader(stdin, self._on_record, self.batcher.count_dropped, self._on_eof)
        self._gpu: Optional[agent_pb2.GpuIdentity] = hello.gpu if hello.HasField("gpu") else None
        self.flusher = _Flusher(self, s.flush_interval_s)
        self._stop = threading.Event()
        self._stop_reason = ""
        self._shutdown_lock = threading.Lock()
        self._shut_down = False
        self._once = OnceLog()
        # Start order; stopped in reverse. Consumers first, so nothing produced is unheard.
        self.parts = [self.sender, self.channel, self.traces, self.windows, self.flusher,
                      self.host, self.nvml, self.reader]

    def start(self) -> None:
        """Start every part; the sender waits briefly for NVML so the Hello has the driver."""
        if self._gpu is not None:
            self.nvml.set_gpu(self._gpu.uuid)
        for part in self.parts:
            part.start()
        self.adopt_leftovers()

    def adopt_leftovers(self) -> None:
        """Deliver the spools earlier sessions of this job and rank left on this node (their
        sidecar is gone: the collector was down when they ended, or the trainer was killed),
        each under its own Hello, then remove them. At start and then about every 30 s (the
        flusher), so a spool whose sidecar was still finishing at our start is taken later."""
        s, hello = self.config.settings, self.config.hello
        found = []
        for path, raw in orphans(s.spool_dir, hello.job, hello.rank, self.spool.path):
            if path in self._leftover_paths:
                continue
            try:
                old_hello = agent_pb2.Hello.FromString(raw)
            except Exception:  # noqa: BLE001 - a damaged file: left for the operator
                continue
            self._leftover_paths.add(path)
            old_spool = Spool(path, s.spool_max_bytes)
            old_spool.claim(os.getpid(), raw)
            sender = Sender(s.collector, old_spool, lambda h=old_hello: h, token=s.token, tls=self._tls,
                            reconnect_max_s=s.reconnect_max_s)
            sender.start()
            sender.finish_when_delivered()
            found.append(sender)
        if found:
            self.leftovers.extend(found)
            pending = sum(len(left.spool) for left in found)
            LOG.info("delivering %d batch(es) left by %d earlier session(s)", pending, len(found))
            self.batcher.event("spool_leftovers", f"{pending} batch(es) left by {len(found)} earlier "
                               "session(s) of this rank on this node: delivered now")

    def _hello(self) -> agent_pb2.Hello:
        """Hello for a new stream (sender thread): the config's, plus driver and latest GPU."""
        self.nvml.ready.wait(_HELLO_WAIT_S)
        hello = agent_pb2.Hello()
        hello.CopyFrom(self.config.hello)
        hello.driver_version = self.nvml.driver_version
        if self._gpu is not None:
            hello.gpu.CopyFrom(self._gpu)
        return hello

    def _on_record(self, record: Record) -> None:
        """Reader thread."""
        if record.t in (contract.STEP, contract.PHASE_TIMES, contract.ALLOC, contract.EVENT):
            self.batcher.add(record.t, record.msg)
        elif record.t == contract.STATS:
            self.batcher.set_trainer_stats(*record.stats, stats=record.msg)
        elif record.t == contract.WINDOW:
            self.windows.submit(record.job)
        elif record.t == contract.TRACE:
            self.traces.submit(record.job)
        elif record.t == contract.IDENTITY:
            self._reidentify(record.msg)
        elif record.t == contract.GPU:
            self._gpu = record.msg
            self.batcher.set_gpu(record.msg)
            self.nvml.set_gpu(record.msg.uuid)

    def _reidentify(self, ident: agent_pb2.Hello) -> None:
        """torch.distributed was initialised with another rank than the launcher's environment
        said (mp.spawn, a launcher without RANK): reconnect as that rank (reader thread)."""
        hello = self.config.hello
        if (ident.rank, ident.world_size) == (hello.rank, hello.world_size):
            return
        LOG.info("rank %d of %d from torch.distributed (the environment said %d of %d): reconnecting",
                 ident.rank, ident.world_size, hello.rank, hello.world_size)
        hello.rank, hello.world_size = ident.rank, ident.world_size
        if self.traces.uploader is not None:
            self.traces.uploader.rank = ident.rank
        self.sender.reconnect()

    def _on_command(self, command: agent_pb2.Command) -> None:
        """Sender thread: forward a capture or window request to the trainer; follow a change
        of the collector's pacing ask."""
        if command.HasField("ack"):
            self.flusher.pace(command.ack.batch_interval_ask_s)
        elif command.HasField("capture_trace"):
            capture = command.capture_trace
            LOG.info("collector asks for a trace of %d steps (%s)", capture.steps,
                     capture.request_id)
            self.channel.send(contract.capture(capture.request_id, capture.steps))
        elif command.HasField("window_now"):
            self.channel.send(contract.window_now(command.window_now.reason))

    def _on_eof(self, reason: str) -> None:
        self.request_stop(reason)

    def request_stop(self, reason: str) -> None:
        """Make :meth:`run` finish (any thread, signal handlers included)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    def flush(self, force: bool = False) -> Optional[int]:
        """Seal what was collected into a batch, spool it and wake the sender; returns its
        sequence number, or None when nothing was due. A batch the disk refuses is kept in
        memory (logged once per error, reported as a ``spool_write_failed`` event)."""
        batch = self.batcher.seal(self.spool.batches_dropped, self.spool.bytes, force=force)
        if batch is None:
            return None
        if not self.spool.write(batch.seq, batch.SerializeToString()) and \
                self._once.log(logging.ERROR, ("spool", self.spool.last_error), "cannot spool to disk (%s): "
                               "batches are kept in memory until acknowledged (at most spool_max_bytes)",
                               self.spool.last_error):
            self.batcher.event("spool_write_failed", f"{self.spool.last_error}; batches kept in memory")
        self.sender.notify()
        return batch.seq

    def run(self) -> None:
        """Start, wait on the calling thread until stopped, then :meth:`shutdown`."""
        self.start()
        self._stop.wait()
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the parts in reverse start order: samplers and reader first, then queued
        windows and traces are finished and the last batch sealed (all within
        ``shutdown_timeout_s``), then the sender gets ``shutdown_timeout_s`` of its own to have
        it acknowledged. Closes the spool last. Idempotent."""
        with self._shutdown_lock:
            if self._shut_down:
                return
            self._shut_down = True
        LOG.info("shutting down (%s)", self._stop_reason or "requested")
        self.request_stop("shutdown")
        timeout_s = self.config.settings.shutdown_timeout_s
        deadline = time.monotonic() + timeout_s
        for part in reversed(self.parts):
            if part is self.sender:  # the last acks get the whole timeout after the last seal
                if not part.stop(time.monotonic() + timeout_s):
                    LOG.info("collector did not acknowledge everything within %.1f s", timeout_s)
            else:
                part.stop(deadline)
        for left in self.leftovers:
            left.stop(deadline)
        if (len(self.spool) or self.spool.quarantined) and not trainer_alive(self.config.trainer_pid):
            _log_beside(self.spool.path)
        self.spool.close()
        for left in self.leftovers:
            left.spool.close()  # removed when everything was delivered
        _remove_workdir(self.config.workdir)


def _log_beside(spool_path: str) -> None:
    """From now on the sidecar's log lines go to ``sidecar.log`` in its spool directory, not to
    stderr: the trainer has exited, and the terminal they share is the next command's (the
    "N unacknowledged batch(es) left" line printed into whatever the user ran next). The spool
    is kept (batches are pending), and the next run of the job and rank delivers them."""
    try:
        handler = logging.FileHandler(os.path.join(spool_path, LOG_FILE))
    except OSError:
        return  # (the spool's own close logs what it can)
    handler.setFormatter(logging.Formatter("%(asctime)s stepwatch-sidecar: %(levelname)s %(message)s"))
    LOG.handlers[:] = [handler]


def _remove_workdir(path: str) -> None:
    """The trainer's temporary directory (exported window traces), once nothing reads it: only
    one of ours (``stepwatch-`` prefix), never anything else a config could name."""
    if path and os.path.basename(os.path.normpath(path)).startswith("stepwatch-"):
        shutil.rmtree(path, ignore_errors=True)


_PACED_MAX_STEPS = 5000  # ... and a paced batch is sealed early at this many steps (size bound)


class _Flusher(PeriodicService):
    """Seals a batch every ``flush_interval_s``, checks about once a second that the trainer
    is alive (stopping the sidecar when it is not), and seals the last batch when stopped.

    Spread in time: the ranks of a job start together, so their batches would reach the
    collector together every interval. The first tick comes after a random part of the interval,
    and a paced rank seals on a random one of the ticks its longer interval spans (:meth:`pace`),
    so a collector sees its ranks' batches evenly over the interval instead of in bursts (10,000
    ranks paced to 10 s from 5 s sent all their batches in half of every 10 s, and acks ran up to
    2.5 s late: bench/results/collector_scale_h100host_spread.md)."""

    def __init__(self, sidecar: Sidecar, interval_s: float, rng=None) -> None:
        self._rng = rng if rng is not None else random.Random()
        super().__init__("stepwatch-flusher", interval_s, first_s=self._rng.uniform(0.0, interval_s))
        self._sidecar = sidecar
        self._own_s = self._seal_every_s = interval_s
        self._last_check = self._last_adopt = self._last_seal = time.monotonic()

    def pace(self, ask_s: float) -> None:
        """The collector asks for batches at most every ``ask_s`` seconds (0: no ask): the
        longer of that and the own interval, at most MAX_PACE_S (a broken collector cannot
        make a rank's data hours late). Takes effect from the next batch."""
        interval = paced_interval(self._own_s, ask_s)
        if interval != self._seal_every_s:
            LOG.info("sending a batch every %.1f s (the collector asks %.1f s; own setting %.1f s)",
                     interval, ask_s, self._own_s)
            self._seal_every_s = interval
            # A random tick of the new interval's span seals next (ranks that sealed together
            # spread over it; at worst one batch comes early).
            self._last_seal = time.monotonic() - self._rng.uniform(0.0, interval)

    def _tick(self) -> None:
        # Ticks stay at the own interval (the liveness check below needs them); a paced
        # batch is sealed every few ticks.
        now = time.monotonic()
        if seal_due(now, self._last_seal, self._seal_every_s, self._own_s) or \
                self._sidecar.batcher.held("step") >= _PACED_MAX_STEPS:
            self._last_seal = now
            self._sidecar.flush()
        if now - self._last_check >= _LIVENESS_EVERY_S:
            self._last_check = now
            if not trainer_alive(self._sidecar.config.trainer_pid):
                self._sidecar.request_stop("trainer exited")
        if now - self._last_adopt >= _ADOPT_EVERY_S:
            self._last_adopt = now
            self._sidecar.adopt_leftovers()

    def stop(self, deadline: float) -> bool:
        ended = super().stop(deadline)
        if self._thread.ident is None:  # never started: the last batch is still sealed
            self._teardown()
        return ended

    def _teardown(self) -> None:
        self._sidecar.flush(force=True)

