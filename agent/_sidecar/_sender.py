"""The gRPC sender: one long-lived Connect stream to the collector, resent after reconnects.

Runs on its own daemon thread ("stepwatch-sender"). It is the only part of the sidecar that
talks to the network; a collector that is down or slow blocks nothing but this thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from typing import Callable, Iterator, Optional

import grpc

from stepwatch.proto import MALFORMED_MESSAGE
from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core.placement import Placement
from stepwatch.core.support import backoff_delay, collector_channel
from ._log import LOG
from ._service import Service, remaining
from ._spool import Spool

__all__ = ["Sender", "backoff_delay"]

# Status codes that will not heal by retrying quickly: retry at the slowest rate.
_FATAL = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT,
          grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED)
_POLL_S = 0.5


_CONNECT = "/stepwatch.v1.AgentService/Connect"
# AgentMessage.batch: field 2, length-delimited (wire type 2).
_BATCH_TAG = bytes([agent_pb2.AgentMessage.DESCRIPTOR.fields_by_name["batch"].number << 3 | 2])


def batch_message(batch_bytes: bytes) -> bytes:
    """A serialized ``AgentMessage(batch=...)`` from a serialized Batch, without parsing it:
    the field's tag, the length as a varint, the bytes (protobuf wire format)."""
    n, varint = len(batch_bytes), bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        varint.append(low | (0x80 if n else 0))
        if not n:
            break
    return _BATCH_TAG + bytes(varint) + batch_bytes


class Sender(Service):
    """Streams spooled batches to ``target`` and acks them in the spool.

    ``hello`` is called on the sender thread before each stream and returns the Hello to open
    the stream with. ``on_command`` is called on the sender thread with every Command other
    than an Ack (e.g. capture_trace); it must not block. :meth:`notify` (any thread) wakes
    the stream when a batch was spooled. :meth:`stop` asks it to deliver what is pending
    by a deadline and end.
    """

    def __init__(self, target: str, spool: Spool, hello: Callable[[], agent_pb2.Hello],
                 token: str = "", reconnect_max_s: float = 30.0, tls: Optional[dict] = None,
                 rng: Optional[random.Random] = None,
                 on_command: Optional[Callable[[agent_pb2.Command], None]] = None,
                 placement_refresh_s: float = 30.0) -> None:
        super().__init__("stepwatch-sender")
        self._placement = Placement(target, refresh_s=placement_refresh_s, down_s=placement_refresh_s)
        self._target = target  # the replica of the current (or last) stream
        self._tls = tls or {}  # collector_channel's tls / ca / cert / key
        self._spool = spool
        self._hello = hello
        self._on_command = on_command
        self._metadata = [("authorization", "Bearer " + token)] if token else None
        self._cap = reconnect_max_s
        self._rng = rng or random.Random()
        self._cond = threading.Condition()
        self._hard = threading.Event()  # end the stream now; _stopping: once the spool is empty
        self._reconnecting = threading.Event()  # the current stream is ended on purpose
        self._call = None
        self.connected = False
        self.delivered = 0
        self.batch_interval_ask_s = 0.0  # the collector's last ask (0: none)
        self._malformed_seq: Optional[int] = None  # lowest pending seq at the last "malformed"

    def notify(self) -> None:
        """A new batch is in the spool (called from the flushing thread)."""
        with self._cond:
            self._cond.notify_all()

    @property
    def spool(self) -> Spool:
        return self._spool

    def finish_when_delivered(self) -> None:
        """Deliver what is spooled, then end by itself (a left-over spool, nothing new comes)."""
        self._stopping.set()
        self.notify()

    def reconnect(self) -> None:
        """End the current stream and open a new one with a fresh Hello (any thread): the
        identity changed. Unacknowledged batches are sent again on the new stream."""
        self._reconnecting.set()
        call = self._call
        if call is not None:
            call.cancel()

    def stop(self, deadline: float) -> bool:
        """Deliver what is pending until ``deadline`` (monotonic), then end the stream (the
        request iterator returns) and join the thread. Idempotent; returns True when
        everything spooled was acknowledged."""
        self._stopping.set()
        self.notify()
        if self._thread.is_alive():
            self._thread.join(remaining(deadline))
        self._hard.set()
        self.notify()
        if self._thread.is_alive():
            self._thread.join(1.0)
        call = self._call
        if self._thread.is_alive() and call is not None:
            call.cancel()
            self._thread.join(1.0)
        return len(self._spool) == 0

    def _done(self) -> bool:
        return self._hard.is_set() or (self._stopping.is_set() and len(self._spool) == 0)

    def _run(self) -> None:
        attempt = 0
        while not self._done():
            delay = None
            try:
                answered = self._stream()
                attempt = 0 if answered else attempt + 1
            except grpc.RpcError as exc:
                delay = self._on_error(exc, attempt)
                attempt += 1
            except Exception:  # never let the thread die: log, back off, retry
                if self._once.log(logging.ERROR, "unexpected", "sender error, will retry"):
                    LOG.exception("sender error")
                attempt += 1
            finally:
                self.connected = False
            if self._done():
                break
            if delay is None:
                delay = backoff_delay(attempt, cap=self._cap, rng=self._rng)
            self._hard.wait(delay)

    def _on_error(self, exc: grpc.RpcError, attempt: int) -> float:
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.CANCELLED and self._reconnecting.is_set():
            self._reconnecting.clear()
            return 0.0
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code == grpc.StatusCode.INVALID_ARGUMENT and (details or "").startswith(MALFORMED_MESSAGE):
            # The collector could not decode a batch (a spool file damaged on disk). Batches go
            # in sequence order and are acked in order, so it is the lowest pending one; twice
            # in a row the same one, and it is moved aside instead of being sent forever.
            pending = self._spool.pending()
            suspect = pending[0] if pending else None
            if suspect is not None and suspect == self._malformed_seq:
                self._spool.quarantine(suspect, f"the collector refused it: {details}")
                self._malformed_seq = None
                return 0.0
            self._malformed_seq = suspect
            self._once.log(logging.WARNING, (code, details), "collector %s refused a batch: %s (retrying once)",
                           self._target, details)
            return backoff_delay(attempt, cap=self._cap, rng=self._rng)
        if code in _FATAL:
            self._once.log(logging.ERROR, (code, details),
                           "collector %s refused the stream: %s: %s (retrying every %.0f s)",
                           self._target, code, details, self._cap)
            return self._cap
        if not (self._hard.is_set() and code == grpc.StatusCode.CANCELLED):
            self._once.log(logging.WARNING, (code, details), "collector %s: %s: %s (reconnecting)",
                           self._target, code, details)
        return backoff_delay(attempt, cap=self._cap, rng=self._rng)

    def _stream(self) -> bool:
        """One Connect stream until it ends; returns True when the collector answered."""
        options = [("grpc.initial_reconnect_backoff_ms", 500),
                   ("grpc.max_reconnect_backoff_ms", int(self._cap * 1000))]
        answered = False
        hello = self._hello()
        target = self._placement.choose(hello.job)
        if target != self._target:
            LOG.info("job %s: collector replica %s (of %d)", hello.job, target, len(self._placement.candidates()))
            self._target = target
        with collector_channel(target, options=options, **self._tls) as channel:
            # Requests go out as bytes: a spooled batch is framed, never parsed again.
            connect = channel.stream_stream(_CONNECT, request_serializer=None,
                                            response_deserializer=agent_pb2.Command.FromString)
            ended = threading.Event()
            requests = self._requests(hello, ended, target)
            self._call = connect(requests, metadata=self._metadata)
            try:
                for command in self._call:
                    if not answered:
                        answered = self.connected = True
                        self._placement.reached(target)
                        self._once.clear()  # the next outage is logged again, once
                        LOG.info("connected to collector %s", target)
                    if command.HasField("ack"):
                        self._spool.ack(command.ack.seq)
                        self.delivered += 1
                        self.notify()
                        if command.ack.batch_interval_ask_s != self.batch_interval_ask_s and self._on_command is not None:
                            self.batch_interval_ask_s = command.ack.batch_interval_ask_s
                            self._on_command(command)  # the collector's pacing ask changed
                    elif self._on_command is not None:
                        self._on_command(command)
            except grpc.RpcError as exc:
                if not answered and exc.code() == grpc.StatusCode.UNAVAILABLE:
                    self._placement.failed(target)  # the job's next replica, if there is one
                raise
            finally:
                ended.set()
                self._call = None
        if not self._done():
            self._once.log(logging.WARNING, "stream_end", "collector %s ended the stream; reconnecting",
                           self._target)
        return answered

    def _requests(self, hello: agent_pb2.Hello, ended: threading.Event, target: str) -> Iterator[bytes]:
        """Request iterator, consumed by a gRPC thread: the Hello, then every pending batch in
        sequence order from the lowest unacknowledged one, then new ones as they are spooled.
        Returns (half-closing the stream) once the sender is done or the call has ended. With
        several collector replicas it ends the stream when the job's replica changed (one
        joined, or the job's own came back): unacked batches go to the new one."""
        yield agent_pb2.AgentMessage(hello=hello).SerializeToString()
        sent = 0
        check_at = time.monotonic() + self._placement.refresh_s
        while not ended.is_set() and not self._done():
            if time.monotonic() >= check_at:
                check_at = time.monotonic() + self._placement.refresh_s
                if not self._placement.single and self._placement.choose(hello.job) != target:
                    self.reconnect()
                    return
            for seq in self._spool.pending(after=sent):
                data = self._spool.read(seq)
                sent = seq
                if data is not None:
                    yield batch_message(data)
            with self._cond:
                if not self._spool.pending(after=sent) and not self._done():
                    self._cond.wait(_POLL_S)
