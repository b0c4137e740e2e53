"""gRPC ingest: the AgentService.Connect stream handler, ControlService, health, graceful stop.

The handler is registered by hand so that the request deserializer can turn a protobuf
DecodeError into a value the handler sees: the stream then ends with INVALID_ARGUMENT
"malformed AgentMessage: ..." instead of gRPC's opaque internal error. Everything runs on the
event loop thread of the ``grpc.aio`` server.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import math
import socket
import time
from typing import AsyncIterator, Callable, Optional

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from stepwatch.core.contract import label_problem
from stepwatch.proto import MALFORMED_MESSAGE, MAX_PACE_S  # (MAX_PACE_S: the longest batch interval acks ask for)
from stepwatch.proto.stepwatch.v1 import agent_pb2

from ._connect_log import ConnectLog
from ._control import CONTROL_SERVICE_NAME, CaptureService, StreamTable
from ._pipeline import Pipeline
from ..wire import bound_strings
from ..state import CollectorHealth
from ..state import TraceRejected, TraceStore

__all__ = ["IngestServer", "SERVICE_NAME", "server_options"]

log = logging.getLogger("stepwatch.collector")


SERVICE_NAME = "stepwatch.v1.AgentService"
_METHOD = "Connect"
_UPLOAD = "UploadTrace"
_LOG_EVERY_S = 10.0
MAX_BATCH_STEPS = 20_000  # 4x what an agent seals into one batch (_PACED_MAX_STEPS)
MAX_BATCH_SAMPLES = 5_000  # samples of one kind (GPU, host, allocator) per batch: 1 Hz over 80 min
HELLO_TIMEOUT_S = 30.0  # an agent stream's first message (the Hello) must come this soon
# ... and its first Batch this soon after the Hello (an agent seals its first batch at its first
# batch interval, at most MAX_PACE_S, host samples included): a stream that only says hello
# cannot hold a job slot, and a rank that never sent a batch is forgotten when its stream ends
FIRST_BATCH_TIMEOUT_S = 2 * MAX_PACE_S + 30.0


def _decoder(cls):
    """A request deserializer that returns a :class:`_Malformed` instead of raising."""
    def decode(data: bytes):
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return _Malformed(str(exc) or "cannot decode")
    return decode


def _in_use(listen: str) -> str:
    """Why ``listen`` (HOST:PORT) cannot be bound because something listens there already, or
    "" (port 0, a name that does not resolve, any other error: gRPC's own bind decides)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        if int(port) == 0:
            return ""
        family, kind, proto, _, addr = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (a socket in TIME_WAIT is no user)
            probe.bind(addr)
    except OSError as exc:
        return f"the port is in use ({exc.strerror}): another collector?" if exc.errno == errno.EADDRINUSE else ""
    except ValueError:
        return ""
    return ""


def server_options(max_message_bytes: int) -> list:
    """The agent server's gRPC channel arguments (bench/churn_bare_grpc.py serves with them too).

    gRPC queues calls the application has not taken yet up to max_pending_requests (1,000 by
    default) and refuses the rest with INTERNAL: after a collector restart every agent of a fleet
    reconnects within seconds, and a quarter of 10,000 streams were refused
    (tests/collector/ingest/test_stream_burst.py; the benchmark's "late" streams before). BDP
    probing (a PING per burst of data received, to grow flow-control windows) cost the collector
    per connection: 2,000 agents on 2,000 connections took 0.24-0.30 core with it and 0.20
    without, what 200 connections cost (bench/results/collector_scale_2core.md); agents' messages
    are small and come seconds apart, the default windows carry them. gRPC takes messages up to
    twice max_message_bytes; the deserializer refuses those over it as malformed and counts them
    (what gRPC refuses itself, beyond twice, it counts not)."""
    return [("grpc.max_receive_message_length", 2 * max_message_bytes), ("grpc.so_reuseport", 0),
            ("grpc.server.max_pending_requests", 20000), ("grpc.server.max_pending_requests_hard_limit", 40000),
            ("grpc.http2.bdp_probe", 0),
            # a connection with no call for 2 minutes is closed (GOAWAY): idle sockets from
            # anyone who reaches the port do not pile up; an agent's stream keeps its own open
            ("grpc.max_connection_idle_ms", 120_000)]


class _Refused(Exception):
    """An upload refused: the store's reason to count (None: counted already), the status and
    its details."""

    def __init__(self, reason: Optional[str], code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.reason, self.code, self.details = reason, code, details


class _Malformed:
    """Stands in for a message whose bytes did not decode; ``reason`` is the decoder's text,
    ``code`` the refusal's counter reason ("malformed", or "oversize" over max_message_bytes)."""

    def __init__(self, reason: str, code: str = "malformed"):
        self.reason, self.code = reason, code


class IngestServer:
    """Owns the ``grpc.aio`` server. ``start`` binds and returns the port; ``stop`` is idempotent.

    ``clock`` returns Unix seconds; every stream event goes to ``pipeline``.
    """

    def __init__(self, pipeline: Pipeline, *, auth_token: str = "", max_message_bytes: int = 4 << 20,
                 clock: Callable[[], float], store: Optional[TraceStore] = None,
                 max_jobs: int = 1000, max_ranks_per_job: int = 16384,
                 tls: Optional[tuple] = None, control_token: str = "", capture_every_s: float = 60.0,
                 max_batches_per_s: float = 0.0, collector_health: Optional[CollectorHealth] = None):
        self._pipeline, self._token, self._clock = pipeline, auth_token, clock
        # batch_interval_ask_s: the batch interval acks ask for
        self._own = collector_health if collector_health is not None else CollectorHealth()
        self._max_batches_per_s = max_batches_per_s
        self._open = 0  # agent streams past their Hello
        self._max_jobs, self._max_ranks = max_jobs, max_ranks_per_job
        self._tls = tls  # (cert PEM, key PEM, client CA PEM or None) or None: plain
        self._control = {"control_token": control_token, "capture_every_s": capture_every_s}
        self._store = store
        self._state = pipeline.state
        self._counts = pipeline.counters
        self._max = max_message_bytes
        self._server: Optional[grpc.aio.Server] = None
        self._health = health.aio.HealthServicer()
        self.streams = StreamTable()  # live Connect streams, for commands (ControlService)
        self._logged: dict[str, tuple] = {}  # refusal reason -> (last logged, refusals since)
        self.connect_log = ConnectLog(log)  # connect/disconnect lines, at most 20 a minute

    async def start(self, listen: str) -> int:
        """Bind ``listen`` (HOST:PORT, port 0 allowed) and start serving; return the bound port.

        Raises RuntimeError when the address cannot be bound.
        """
        opts = server_options(self._max)
        in_use = _in_use(listen)
        if in_use:  # said once, plainly, before gRPC's core logs its own add_port line to stderr
            raise RuntimeError(f"cannot bind gRPC address {listen}: {in_use}")
        server = grpc.aio.server(options=opts)
        self._add_services(server)
        try:
            if self._tls is None:
                port = server.add_insecure_port(listen)
            else:
                cert, key, client_ca = self._tls
                port = server.add_secure_port(listen, grpc.ssl_server_credentials(
                    [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None))
        except RuntimeError as exc:
            raise RuntimeError(f"cannot bind gRPC address {listen}: {exc}") from None
        await server.start()
        for service in ("", SERVICE_NAME, CONTROL_SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        return port

    def _add_services(self, server) -> None:
        """AgentService (Connect, UploadTrace), the standard health service and ControlService
        (Capture, DownloadTrace), each decoding its requests by hand."""
        handler = grpc.stream_stream_rpc_method_handler(
            self._connect, request_deserializer=self._deserialize,
            response_serializer=agent_pb2.Command.SerializeToString)
        upload = grpc.stream_unary_rpc_method_handler(
            self._upload, request_deserializer=self._deserialize_chunk,
            response_serializer=agent_pb2.TraceStored.SerializeToString)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            SERVICE_NAME, {_METHOD: handler, _UPLOAD: upload}),))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        control = CaptureService(self.streams, self._state, authorized=self._authorized, clock=self._clock,
                                 store=self._store, **self._control)
        # By hand, like Connect: undecodable request bytes become INVALID_ARGUMENT naming the
        # problem (grpc's generated handler answered UNKNOWN with the decoder's exception).
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(CONTROL_SERVICE_NAME, {
            "Capture": grpc.unary_unary_rpc_method_handler(
                control.Capture, request_deserializer=_decoder(agent_pb2.CaptureRequest),
                response_serializer=agent_pb2.CaptureReply.SerializeToString),
            "DownloadTrace": grpc.unary_stream_rpc_method_handler(
                control.DownloadTrace, request_deserializer=_decoder(agent_pb2.TraceId),
                response_serializer=agent_pb2.TraceChunk.SerializeToString)}),))

    async def stop(self, grace_s: float) -> None:
        """Report NOT_SERVING, refuse new streams, cancel live ones after ``grace_s`` seconds."""
        server, self._server = self._server, None
        if server is None:
            return
        await self._health.enter_graceful_shutdown()
        await server.stop(grace_s)
        self.connect_log.flush()

    def _deserialize(self, data: bytes):
        if len(data) > self._max:
            return _Malformed(f"message of {len(data)} bytes is over max_message_bytes {self._max}", "oversize")
        try:
            return agent_pb2.AgentMessage.FromString(data)
        except DecodeError as exc:
            self._counts.add("decode_errors")
            return _Malformed(str(exc) or "cannot decode")

    def _deserialize_chunk(self, data: bytes):
        try:
            return agent_pb2.TraceChunk.FromString(data)
        except DecodeError as exc:
            return _Malformed(str(exc) or "cannot decode")

    def _upload_refusal(self, chunk: agent_pb2.TraceChunk) -> Optional[tuple]:
        """(reason, status, details) when an upload naming itself in ``chunk`` is refused, else
        None. An agent token is shared by every job: an upload is taken only for a request this
        collector sent to that rank of that job, and only once (a chunk without a request id or
        rank is left to the store's begin(), which says why not)."""
        if not chunk.request_id or chunk.rank < 0:
            return None
        if not self._state.traces.issued(chunk.request_id, chunk.job, chunk.rank):
            return "not_issued", grpc.StatusCode.PERMISSION_DENIED, (
                f"trace refused: this collector did not ask rank {chunk.rank} of job "
                f"{chunk.job!r:.80} for request {chunk.request_id!r:.80}")
        if self._store.has(chunk.job, chunk.rank, chunk.request_id):
            return "exists", grpc.StatusCode.ALREADY_EXISTS, (
                f"trace refused: request {chunk.request_id!r:.80} of rank {chunk.rank} of job "
                f"{chunk.job!r:.80} is stored already (a stored trace is never replaced)")
        return None

    async def _upload(self, chunks, context) -> agent_pb2.TraceStored:
        """One trace upload: auth, the naming first chunk, data to a part file off the loop,
        checks, rename. Every refusal is a clear status; nothing partial is ever served."""
        if not self._authorized(context):
            await self._abort(context, "unauthenticated", grpc.StatusCode.UNAUTHENTICATED,
                              "stepwatch: wrong or missing auth token")
        if self._store is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this collector keeps no traces")
        upload, refused = None, None
        try:
            async for chunk in chunks:
                if isinstance(chunk, _Malformed):
                    raise _Refused("invalid", grpc.StatusCode.INVALID_ARGUMENT, f"malformed TraceChunk: {chunk.reason}")
                if upload is None:
                    refusal = self._upload_refusal(chunk)
                    if refusal is not None:
                        raise _Refused(*refusal)
                    upload = self._store.begin(chunk.job, chunk.rank, chunk.request_id, chunk.total_bytes)
                if chunk.data:
                    await asyncio.to_thread(upload.write, chunk.data)
            if upload is None:
                raise _Refused("invalid", grpc.StatusCode.INVALID_ARGUMENT, "UploadTrace sent no TraceChunk")
            size = await asyncio.to_thread(upload.finish)
            log.info("stepwatch collector: trace %s stored (%d bytes)", upload.trace_id, size)
            trace_id, upload = upload.trace_id, None
            return agent_pb2.TraceStored(trace_id=trace_id, bytes=size)
        except _Refused as exc:
            refused = exc
        except TraceRejected as exc:
            code = {"too_large": grpc.StatusCode.RESOURCE_EXHAUSTED, "busy": grpc.StatusCode.UNAVAILABLE,
                    "disk": grpc.StatusCode.RESOURCE_EXHAUSTED}.get(exc.code, grpc.StatusCode.INVALID_ARGUMENT)
            # (refusals by begin() are counted there)
            refused = _Refused(exc.code if upload is not None else None, code, f"trace refused: {exc}")
        except OSError as exc:
            refused = _Refused("disk", grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"trace refused: cannot write: {exc.strerror or exc}")
        finally:
            if upload is not None:  # the part file goes before the caller hears of the refusal
                upload.abort()
        if refused.reason is not None:
            self._store.reject(refused.reason)
        await context.abort(refused.code, refused.details)

    async def _abort(self, context, reason: str, code: grpc.StatusCode, details: str) -> None:
        self._counts.reject(reason)
        # At most one line per reason every _LOG_EVERY_S: anyone who reaches the port could
        # otherwise fill the log (the counter has every refusal).
        now = time.monotonic()
        last, quiet = self._logged.get(reason, (-_LOG_EVERY_S, 0))
        if now - last >= _LOG_EVERY_S:
            more = f" ({quiet} more refusals for {reason} not logged)" if quiet else ""
            log.warning("stepwatch collector: rejected stream from %s: %s%s", context.peer(), details, more)
            self._logged[reason] = (now, 0)
        else:
            self._logged[reason] = (last, quiet + 1)
        await context.abort(code, details)

    def _authorized(self, context) -> bool:
        if not self._token:
            return True
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self._token}".encode())

    def _hello_refusal(self, first) -> Optional[tuple]:
        """(reason, status, details) when the stream's first message is not a Hello this
        collector takes, else None."""
        if isinstance(first, _Malformed):
            return first.code, grpc.StatusCode.INVALID_ARGUMENT, f"{MALFORMED_MESSAGE}: {first.reason}"
        if first.WhichOneof("payload") != "hello":
            return ("no_hello", grpc.StatusCode.INVALID_ARGUMENT,
                    "the first AgentMessage must carry a Hello, got "
                    f"{first.WhichOneof('payload') or 'an empty message'}")
        hello = first.hello
        problem = label_problem(hello.job)
        if problem:
            return "invalid_hello", grpc.StatusCode.INVALID_ARGUMENT, f"Hello.job {problem}"
        if hello.rank < 0:
            return ("invalid_hello", grpc.StatusCode.INVALID_ARGUMENT,
                    f"Hello.rank must be >= 0, got {hello.rank}")
        refused = self._state.admit(hello, self._max_jobs, self._max_ranks)
        if refused == "too_many_jobs":
            return (refused, grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"this collector holds its maximum of {self._max_jobs} jobs (max_jobs); "
                    f"job {hello.job[:80]!r} is refused")
        if refused == "too_many_ranks":
            return (refused, grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"job {hello.job[:80]!r} already has {self._max_ranks} ranks (max_ranks_per_job); "
                    f"rank {hello.rank} is refused")
        return None

    async def _first_hello(self, requests, context) -> Optional[agent_pb2.Hello]:
        """Read and validate the first message; abort the stream when it is not a usable Hello."""
        first = None

        async def read_first():
            async for msg in requests:
                return msg
            return None

        try:
            first = await asyncio.wait_for(read_first(), HELLO_TIMEOUT_S)
        except asyncio.TimeoutError:
            # a connection that never says who it is holds a stream and memory: closed
            await self._abort(context, "hello_timeout", grpc.StatusCode.DEADLINE_EXCEEDED,
                              f"no Hello within {HELLO_TIMEOUT_S:g} s of opening the stream")
        if first is None:
            self._counts.reject("no_hello")
            return None
        refusal = self._hello_refusal(first)
        if refusal is not None:
            await self._abort(context, *refusal)
        hello = first.hello
        cut = bound_strings(hello)  # (collector/wire/_bounds.py: one table for every string field)
        if cut:
            self._counts.add_by("trimmed", "string", cut)
        return hello

    async def _connect(self, requests, context) -> AsyncIterator[agent_pb2.Command]:
        """One agent stream: auth, Hello, then an Ack for every applied or duplicate Batch, and
        the Commands queued on the stream (capture_trace) as they come."""
        if not self._authorized(context):
            await self._abort(context, "unauthenticated", grpc.StatusCode.UNAUTHENTICATED,
                              "stepwatch: wrong or missing auth token")
        hello = await self._first_hello(requests, context)
        if hello is None:
            return
        key = self._pipeline.connect(hello, self._clock())
        self.connect_log.connected(hello.job, hello.rank, hello.host, hello.session_id)
        stream = self.streams.open(hello, requests)  # commands can go out while the agent is silent
        self._open += 1
        self._pace()
        first_by = time.monotonic() + FIRST_BATCH_TIMEOUT_S  # None once a batch came
        try:
            while True:
                if first_by is None:
                    msg = await stream.next()
                else:
                    try:
                        msg = await asyncio.wait_for(stream.next(), max(0.0, first_by - time.monotonic()))
                    except asyncio.TimeoutError:
                        await self._abort(context, "no_batch", grpc.StatusCode.DEADLINE_EXCEEDED,
                                          f"no Batch within {FIRST_BATCH_TIMEOUT_S:g} s of the Hello")
                if msg is None:
                    break
                if isinstance(msg, agent_pb2.Command):
                    yield msg
                    continue
                if not isinstance(msg, _Malformed) and msg.WhichOneof("payload") == "batch":
                    first_by = None
                ack = await self._handle(msg, key, hello, context)
                if ack is not None:
                    yield ack
        finally:
            self._open -= 1
            self._pace()
            self.streams.close(stream)
            self._pipeline.disconnect(key, hello, self._clock())
            self.connect_log.disconnected(hello.job, hello.rank)

    async def _handle(self, msg, key, hello: agent_pb2.Hello, context) -> Optional[agent_pb2.Command]:
        if isinstance(msg, _Malformed):
            await self._abort(context, msg.code, grpc.StatusCode.INVALID_ARGUMENT,
                              f"{MALFORMED_MESSAGE}: {msg.reason}")
        kind = msg.WhichOneof("payload")
        if kind == "hello":
            await self._abort(context, "invalid_hello", grpc.StatusCode.INVALID_ARGUMENT,
                              "Hello is only allowed as the first AgentMessage")
        if kind != "batch":
            return None  # a payload from a newer protocol version: ignore it
        b = msg.batch
        if len(b.steps) > MAX_BATCH_STEPS or max(len(b.gpu_samples), len(b.host), len(b.allocator)) > MAX_BATCH_SAMPLES:
            # Applying one batch holds every other agent's acks: a batch far larger than any
            # agent seals (5,000 steps at most) is refused whole, as malformed, and counted;
            # the agent moves it aside after the second refusal instead of resending it.
            await self._abort(context, "batch_too_large", grpc.StatusCode.INVALID_ARGUMENT, (
                f"{MALFORMED_MESSAGE}: a batch of {len(b.steps)} steps and "
                f"{max(len(b.gpu_samples), len(b.host), len(b.allocator))} samples of one kind is over the "
                f"collector's bound of {MAX_BATCH_STEPS} steps and {MAX_BATCH_SAMPLES} samples per batch"))
        cut = bound_strings(msg.batch)
        if cut:
            self._counts.add_by("trimmed", "string", cut)
        self._pipeline.batch(key, hello, msg.batch, self._clock())
        if msg.batch.traces:
            self.streams.traces_arrived(msg.batch.traces)
        return agent_pb2.Command(ack=agent_pb2.Ack(seq=msg.batch.seq, batch_interval_ask_s=self._own.batch_interval_ask_s))

    def _pace(self) -> None:
        """The batch interval acknowledgements ask for: with more agents than
        ``max_batches_per_s``, every agent sending each (agents / max) seconds keeps the message
        rate at or under the maximum (0: no ask). Whole seconds, so that a stream opening or
        closing seldom changes every agent's ask."""
        n, most = self._open, self._max_batches_per_s
        self._own.batch_interval_ask_s = float(min(MAX_PACE_S, math.ceil(n / most))) if most and n > most else 0.0
