"""Commands to agents: live Connect streams with an outbox, and ControlService.Capture.

A Connect handler iterates the agent's requests, so on its own it could only answer when a
request arrives. :class:`AgentStream` runs a reader task that moves requests into one queue,
into which :meth:`AgentStream.send` also puts outgoing Commands; the handler takes items from
that queue in arrival order, so a command goes out while the agent is silent. The reader
holds at most ``max_ahead`` unhandled requests (gRPC flow control still applies beyond that).

Everything here runs on the event loop thread of the ``grpc.aio`` server.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import ipaddress
import hmac
import logging
import math
import uuid
from typing import Callable, Iterable, Optional

import grpc

from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

from ..state import CollectorState
from ..state import CHUNK_BYTES, TraceStore

__all__ = ["AgentStream", "StreamTable", "CaptureService", "CONTROL_SERVICE_NAME", "validate_capture"]

log = logging.getLogger("stepwatch.collector")

CONTROL_SERVICE_NAME = "stepwatch.v1.ControlService"
MAX_STEPS = 1000
DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 3600.0
_IN, _CMD, _END, _ERR = "in", "cmd", "end", "err"


class AgentStream:
    """One live Connect stream: ``next()`` yields incoming messages and queued Commands.

    Create it inside the handler (it starts a task on the running loop); ``close`` it in the
    handler's ``finally``. ``send`` never blocks: it refuses (returns False) once the stream is
    closed or ``max_commands`` commands wait unsent.
    """

    def __init__(self, hello: agent_pb2.Hello, requests, *, max_ahead: int = 16, max_commands: int = 16):
        self.hello = hello
        self._items: asyncio.Queue = asyncio.Queue()
        self._credit = asyncio.Semaphore(max_ahead)
        self._pending, self._max_commands = 0, max_commands
        self._closed = False
        self._reader = asyncio.get_running_loop().create_task(
            self._read(requests), name=f"stepwatch-read-{hello.job}-{hello.rank}")

    async def _read(self, requests) -> None:
        try:
            async for msg in requests:
                await self._credit.acquire()
                self._items.put_nowait((_IN, msg))
        except Exception as exc:  # noqa: BLE001 - handed to the handler, which raises it there
            self._items.put_nowait((_ERR, exc))
            return
        self._items.put_nowait((_END, None))

    def send(self, command: agent_pb2.Command) -> bool:
        """Queue ``command`` for the agent; False when the stream is closed or its outbox full."""
        if self._closed or self._pending >= self._max_commands:
            return False
        self._pending += 1
        self._items.put_nowait((_CMD, command))
        return True

    async def next(self):
        """The next incoming message or outgoing ``Command``, in arrival order; None once the
        agent half-closed. Raises what reading the requests raised."""
        kind, value = await self._items.get()
        if kind == _IN:
            self._credit.release()
        elif kind == _CMD:
            self._pending -= 1
        elif kind == _ERR:
            raise value
        return value

    def close(self) -> None:
        """Refuse further commands and stop the reader task. Idempotent."""
        self._closed = True
        self._reader.cancel()


class StreamTable:
    """Live streams by (job, rank), and waiters for trace references by request id."""

    def __init__(self):
        self._streams: dict[tuple, list[AgentStream]] = {}
        self._waiters: dict[str, asyncio.Event] = {}

    def open(self, hello: agent_pb2.Hello, requests) -> AgentStream:
        stream = AgentStream(hello, requests)
        self._streams.setdefault((hello.job, hello.rank), []).append(stream)
        return stream

    def close(self, stream: AgentStream) -> None:
        stream.close()
        key = (stream.hello.job, stream.hello.rank)
        streams = self._streams.get(key, [])
        if stream in streams:
            streams.remove(stream)
        if not streams:
            self._streams.pop(key, None)

    def live(self, job: str) -> dict[int, AgentStream]:
        """``{rank: newest live stream}`` of ``job`` (a reconnect can briefly overlap the old stream)."""
        return {rank: streams[-1] for (j, rank), streams in self._streams.items() if j == job and streams}

    def waiter(self, request_id: str) -> asyncio.Event:
        return self._waiters.setdefault(request_id, asyncio.Event())

    def drop_waiter(self, request_id: str) -> None:
        self._waiters.pop(request_id, None)

    def traces_arrived(self, refs: Iterable[agent_pb2.TraceRef]) -> None:
        """Wake the Capture calls waiting for any of ``refs`` (call after the state stored them)."""
        for ref in refs:
            event = self._waiters.get(ref.request_id)
            if event is not None:
                event.set()


def validate_capture(req: agent_pb2.CaptureRequest) -> Optional[str]:
    """The problem with ``req``, naming the field, or None when it is valid."""
    if not req.job:
        return "CaptureRequest.job must not be empty"
    if not 1 <= req.steps <= MAX_STEPS:
        return f"CaptureRequest.steps must be in 1..{MAX_STEPS}, got {req.steps}"
    if not (math.isfinite(req.timeout_s) and 0 <= req.timeout_s <= MAX_TIMEOUT_S):
        return f"CaptureRequest.timeout_s must be in 0..{MAX_TIMEOUT_S:g} seconds (0: {DEFAULT_TIMEOUT_S:g}), got {req.timeout_s}"
    bad = [r for r in req.ranks if r < 0]
    if bad:
        return f"CaptureRequest.ranks must be >= 0, got {bad[0]}"
    return None


_REFUSED = ("stepwatch: control call refused: send the collector's control_token, or call from "
            "the collector's own host (loopback) with its auth token")


def peer_is_loopback(peer: str) -> bool:
    """Whether a gRPC peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "unix:...") is
    this host."""
    if peer.startswith("unix:"):
        return True
    kind, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0].strip("[]") if kind in ("ipv4", "ipv6") else ""
    try:
        return ipaddress.ip_address(urllib.parse.unquote(host)).is_loopback
    except ValueError:
        return False


class CaptureService(agent_pb2_grpc.ControlServiceServicer):
    """ControlService on the ingest server. ``authorized(context)`` is the Connect auth check;
    ``clock`` gives Unix seconds for the request's record (waiting uses the loop's clock)."""

    def __init__(self, streams: StreamTable, state: CollectorState, *,
                 authorized: Callable[[object], bool], clock: Callable[[], float],
                 store: Optional[TraceStore] = None, control_token: str = "",
                 capture_every_s: float = 60.0):
        self._streams, self._state, self._clock = streams, state, clock
        self._agent_authorized = authorized
        self._store = store
        self._control_token = control_token
        self._capture_every_s = capture_every_s
        self._last_capture: dict[str, float] = {}  # job -> loop time of its last capture

    def _authorized(self, context) -> bool:
        """A control call: with ``control_token`` set, that token; without it, only a caller on
        loopback (who also needs the agents' auth_token when one is set): nobody who merely
        reaches the ingest port may make every rank profile."""
        if self._control_token:
            given = dict(context.invocation_metadata() or ()).get("authorization", "")
            return hmac.compare_digest(given.encode(), f"Bearer {self._control_token}".encode())
        return peer_is_loopback(context.peer()) and self._agent_authorized(context)

    async def DownloadTrace(self, request: agent_pb2.TraceId, context):  # noqa: N802
        """Stream an uploaded trace back in chunks of at most 1 MiB."""
        if not self._authorized(context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSED)
        if not isinstance(request, agent_pb2.TraceId):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed TraceId: {request.reason}"[:300])
        path = self._store.path(request.trace_id) if self._store is not None else None
        if path is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no uploaded trace {request.trace_id!r:.200}")
        try:
            fh = open(path, "rb")
        except OSError:  # removed by the size cap since the lookup
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no uploaded trace {request.trace_id!r:.200}")
        with fh:
            first = True
            while data := await asyncio.to_thread(fh.read, CHUNK_BYTES):
                yield agent_pb2.TraceChunk(request_id=request.trace_id if first else "", data=data)
                first = False

    async def Capture(self, request: agent_pb2.CaptureRequest, context) -> agent_pb2.CaptureReply:  # noqa: N802
        """Send CaptureTrace to the asked live ranks, wait for their TraceRefs, reply per rank."""
        if not self._authorized(context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSED)
        if not isinstance(request, agent_pb2.CaptureRequest):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed CaptureRequest: {request.reason}"[:300])
        problem = validate_capture(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        now = asyncio.get_running_loop().time()
        last = self._last_capture.get(request.job)
        if last is not None and now - last < self._capture_every_s:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"job {request.job!r:.80} was captured {now - last:.0f} s ago; at most one capture "
                                f"per job every {self._capture_every_s:.0f} s (capture_every_s)")
        live = self._streams.live(request.job)
        if not live:  # checked before the limiter: bogus jobs never enter (nor empty) it
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no connected rank of job {request.job!r:.80}")
        if len(self._last_capture) >= 10_000:
            # only jobs with a live rank get here; drop those whose interval has passed (they
            # limit nothing), never a job still inside its interval
            self._last_capture = {j: t for j, t in self._last_capture.items() if now - t < self._capture_every_s}
        self._last_capture[request.job] = now
        ranks = sorted(set(request.ranks)) or sorted(live)
        request_id = uuid.uuid4().hex
        self._state.traces.open(request_id, request.job, request.steps, ranks, self._clock())
        command = agent_pb2.Command(capture_trace=agent_pb2.CaptureTrace(request_id=request_id, steps=request.steps))
        errors: dict[int, str] = {}
        for rank in ranks:
            if rank not in live:
                errors[rank] = "not connected"
            elif not live[rank].send(command):
                errors[rank] = "busy"  # its outbox is full: the agent does not read its stream
        asked = [r for r in ranks if r not in errors]
        log.info("stepwatch collector: capture %s: job=%s ranks=%s steps=%d", request_id, request.job, asked, request.steps)
        refs = await self._wait(request_id, asked, self._timeout(request, context))
        hosts = {st.rank: st.hello.host for st in self._state.snapshot(job=request.job)}
        reply = agent_pb2.CaptureReply(request_id=request_id)
        for rank in ranks:
            if rank in refs and rank not in errors:
                reply.traces.add(rank=rank, host=refs[rank].host, trace=refs[rank].ref)
            else:
                reply.traces.add(rank=rank, host=hosts.get(rank, ""), trace=agent_pb2.TraceRef(
                    request_id=request_id, error=errors.get(rank, "timeout")))
        return reply

    @staticmethod
    def _timeout(request: agent_pb2.CaptureRequest, context) -> float:
        """Requested timeout (0: the default), shortened to answer before the caller's deadline."""
        timeout = request.timeout_s or DEFAULT_TIMEOUT_S
        remaining = context.time_remaining()
        return timeout if remaining is None else max(0.0, min(timeout, remaining - 0.5))

    async def _wait(self, request_id: str, ranks: list, timeout_s: float) -> dict:
        """``{rank: RankRef}`` once every rank in ``ranks`` reported, or whatever came by the deadline."""
        event = self._streams.waiter(request_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                refs = self._state.traces.refs(request_id)
                remaining = deadline - loop.time()
                if all(r in refs for r in ranks) or remaining <= 0:
                    return refs
                event.clear()  # no await since the check: a report cannot slip in between
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._streams.drop_waiter(request_id)
