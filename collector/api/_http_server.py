"""A tiny HTTP/1.1 server on asyncio: GET only, one request per connection (Connection: close).

Routes map a path (query string ignored) to a function returning ``(status, content_type,
body)`` or ``(status, content_type, body, extra_header_lines)``; query routes get the decoded
query string as a dict (last value wins); path routes are patterns such as
``/api/jobs/{job}/windows`` whose functions get the URL-decoded ``{name}`` segments as a dict.
Plain routes run on the event loop thread and must be quick (``/healthz``, the page, the alert
list). Query and path routes, whose answers grow with the fleet (``/api/jobs`` of 10,000 ranks)
or with a file, run on the one worker thread, one request at a time, as do threaded routes,
which also get the request headers (lower-case names): a scrape of a large state renders
there while the loop keeps acknowledging batches (``/metrics``). A route may answer a
:class:`FileBody` (an open file and its size): it is streamed in 1 MiB reads off the loop, each
written and drained before the next, so four parallel downloads of a 200 MB trace hold a few
MiB, not 800. A large answer in memory goes out in 256 KiB slices of its (shared) bytes, each
drained before the next, so a slow client holds one slice, not a copy of the answer.
A client that takes no bytes of a slice for ``write_timeout_s`` is cut off (its connection
aborted, the buffered answer freed, ``cut_off`` counted). Each connection's kernel send buffer
is fixed at ``_SEND_BUFFER`` (256 KiB; Linux books twice that): autotuned (up to
``net.ipv4.tcp_wmem``'s 4 MiB), a client that never reads takes some 16 slices into the kernel,
each copied on the event loop (100 such clients at 3,000 ranks on 2 cores: acks 0.7 s p99
autotuned, 64-106 ms fixed; bench/results/http_stuck_readers_2core.md). So a stuck reader costs
at most one slice in the collector and ~0.5 MB in the kernel, for ``write_timeout_s`` a slice.
The price: one connection's throughput is bounded by that buffer over the round trip (about
5 MB/s to a client 50 ms away, a 100 MB trace in 20 s; hundreds of MB/s on a LAN).
Bad requests get 400, unknown paths 404, other methods 405; with a ``token`` every path but
the open ones (``/healthz``) needs it (bearer, or basic auth with it as the password), else 401. A route that raises answers 500
and logs; the server keeps going.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import hmac
import logging
import os
import re
import socket
import ssl
import sys
import threading
import urllib.parse
from typing import Callable, Mapping, Optional

__all__ = ["FileBody", "HttpServer", "PathRoute", "QueryRoute", "Route", "ThreadedRoute", "accepts"]

log = logging.getLogger("stepwatch.collector")

Route = Callable[[], tuple]
QueryRoute = Callable[[Mapping[str, str]], tuple]
PathRoute = Callable[[Mapping[str, str]], tuple]
ThreadedRoute = Callable[[Mapping[str, str]], tuple]
_REASONS = {200: "OK", 401: "Unauthorized", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 500: "Internal Server Error"}
_MAX_HEAD = 16 * 1024
_READ_TIMEOUT_S = 10.0
_BODY_CHUNK = 256 << 10  # bytes of a large answer handed to the transport at a time
_SEND_BUFFER = 256 << 10  # each connection's SO_SNDBUF (fixed: no autotuning up to MiBs)
_FILE_CHUNK = 1 << 20


class FileBody:
    """A response body streamed from an open binary file of ``size`` bytes (closed when sent)."""

    def __init__(self, fh, size: int):
        self.fh, self.size = fh, size

    def __len__(self) -> int:
        return self.size


class HttpServer:
    """``start(host, port)`` binds (port 0 allowed) and returns the port; ``stop`` is idempotent."""

    def __init__(self, routes: Mapping[str, Route], query_routes: Optional[Mapping[str, QueryRoute]] = None,
                 path_routes: Optional[Mapping[str, PathRoute]] = None,
                 threaded_routes: Optional[Mapping[str, ThreadedRoute]] = None,
                 token: str = "", open_paths: frozenset = frozenset({"/healthz"}), nice: int = 0,
                 write_timeout_s: float = 30.0):
        """``nice``: added to the worker thread's niceness (Linux; 0: left as it is), so on a
        saturated core the event loop (``/healthz``, acks) is scheduled ahead of a large answer
        being built. ``write_timeout_s``: a client that takes no bytes for this long (a small
        answer, one 256 KiB slice of a large one, one 1 MiB read of a file) is cut off and what
        was buffered for it freed."""
        self._write_timeout_s = write_timeout_s
        self._routes = dict(routes)
        self._token, self._open = token, open_paths
        self._threaded = dict(threaded_routes or {})
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stepwatch-http",
                                                           initializer=lower_thread_priority, initargs=(nice,))
        self._query_routes = dict(query_routes or {})
        self._path_routes = [(pattern, _compile(pattern), fn) for pattern, fn in (path_routes or {}).items()]
        self._server: Optional[asyncio.base_events.Server] = None
        self.cut_off = 0  # answers cut off: the client took no bytes for write_timeout_s

    async def start(self, host: str, port: int, ssl_context=None) -> int:
        """``ssl_context``: serve HTTPS only (an ``ssl.SSLContext``), else plain HTTP."""
        try:
            self._server = await asyncio.start_server(self._serve, host.strip("[]") or None, port,
                                                      limit=_MAX_HEAD, ssl=ssl_context,
                                                      ssl_handshake_timeout=_READ_TIMEOUT_S if ssl_context else None)
        except OSError as exc:
            raise RuntimeError(f"cannot bind HTTP address {host}:{port}: {exc.strerror or exc}") from None
        return self._server.sockets[0].getsockname()[1]

    @property
    def paths(self) -> list:
        """All routed paths, sorted."""
        return sorted({*self._routes, *self._query_routes, *self._threaded,
                       *(p for p, _, _ in self._path_routes)})

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)
            except OSError:  # (a socket that refuses it keeps the kernel's own sizing)
                pass
        try:
            status, ctype, body, extra = await self._respond(reader)
            head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}", f"Content-Type: {ctype}",
                    f"Content-Length: {len(body)}", "Connection: close", *extra]
            head_bytes = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
            if isinstance(body, FileBody):
                writer.write(head_bytes)
                while chunk := await asyncio.to_thread(body.fh.read, _FILE_CHUNK):
                    writer.write(chunk)
                    await self._drain(writer)
            elif len(body) <= _BODY_CHUNK:
                writer.write(head_bytes + body)
            else:
                # a large answer (the fleet's /api/jobs: 21 MB at 10,000 ranks) goes out a slice
                # of the shared bytes at a time: a client that reads slowly or never holds one
                # slice in the transport's buffer, not a copy of the whole answer (100 stuck
                # readers of it held 0.8 GB and stalled acks for seconds)
                writer.write(head_bytes)
                view = memoryview(body)
                for start in range(0, len(view), _BODY_CHUNK):
                    writer.write(view[start:start + _BODY_CHUNK])
                    await self._drain(writer)
            await self._drain(writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away (or failed the TLS handshake); nothing to answer
        except asyncio.TimeoutError:
            self.cut_off += 1
            writer.transport.abort()  # (close() would wait to send what the client never takes)
        finally:
            if isinstance(body, FileBody):
                body.fh.close()
            writer.close()

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        """Wait for the client to take what was written, at most ``write_timeout_s``."""
        await asyncio.wait_for(writer.drain(), self._write_timeout_s)

    async def _respond(self, reader: asyncio.StreamReader):
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            return 408, "text/plain; charset=utf-8", b"request timeout\n", ()
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, ValueError):
            return 400, "text/plain; charset=utf-8", b"bad request\n", ()
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
            return 400, "text/plain; charset=utf-8", b"bad request\n", ()
        method, (target, _, query) = parts[0], parts[1].partition("?")
        if self._token and target not in self._open and not _authorized(_headers(head), self._token):
            return (401, "text/plain; charset=utf-8", b"unauthorized: send the collector's http_token\n",
                    ('WWW-Authenticate: Basic realm="stepwatch", charset="UTF-8"',))
        if target in self._threaded:
            if method != "GET":
                return 405, "text/plain; charset=utf-8", b"method not allowed\n", ("Allow: GET",)
            headers = _headers(head)
            try:
                status, ctype, body, *extra = await asyncio.get_running_loop().run_in_executor(
                    self._pool, self._threaded[target], headers)
            except Exception:  # noqa: BLE001 - as for the other routes
                log.exception("stepwatch collector: HTTP route %s failed", target)
                return 500, "text/plain; charset=utf-8", b"internal error\n", ()
            return status, ctype, body, tuple(extra[0]) if extra else ()
        route = self._routes.get(target)
        if target in self._query_routes:
            route = functools.partial(self._query_routes[target], dict(urllib.parse.parse_qsl(query)))
        if route is None:
            route = self._match(target, query)
        if route is None:
            return 404, "text/plain; charset=utf-8", b"not found\n", ()
        if method != "GET":
            return 405, "text/plain; charset=utf-8", b"method not allowed\n", ("Allow: GET",)
        try:
            if target in self._routes:
                status, ctype, body, *extra = route()
            else:  # a query or path route: its answer grows with the fleet or a file
                status, ctype, body, *extra = await asyncio.get_running_loop().run_in_executor(self._pool, route)
        except Exception:  # noqa: BLE001 - one broken route must not take the server down
            log.exception("stepwatch collector: HTTP route %s failed", target)
            return 500, "text/plain; charset=utf-8", b"internal error\n", ()
        return status, ctype, body, tuple(extra[0]) if extra else ()

    def _match(self, target: str, query: str = "") -> Optional[Route]:
        """A path route's call: its parameters from the path's segments, and its query's pairs
        under "query" (a dict)."""
        for _, regex, fn in self._path_routes:
            m = regex.fullmatch(target)
            if m:
                params = {k: urllib.parse.unquote(v) for k, v in m.groupdict().items()}
                params["query"] = dict(urllib.parse.parse_qsl(query))
                return functools.partial(fn, params)
        return None


def lower_thread_priority(by: int) -> None:
    """Raise the calling thread's niceness by ``by`` (at most to 19). Linux only, where
    setpriority on a thread id names that one thread (elsewhere it would name a process).
    Never raises: a thread that cannot be lowered runs as it was (logged at debug)."""
    if by <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except Exception as exc:  # noqa: BLE001 - an initializer that raises breaks the pool
        log.debug("stepwatch collector: HTTP worker priority left as it is: %s", exc)


def accepts(header: str, token: str) -> bool:
    """Whether an Accept or Accept-Encoding ``header`` lists ``token`` (case-insensitive, its
    parameters ignored) with a quality above 0: ``gzip;q=0`` refuses gzip."""
    for item in header.split(","):
        name, *params = (p.strip() for p in item.split(";"))
        if name.lower() != token:
            continue
        q = next((p.split("=", 1)[1] for p in params if p.lower().startswith("q=")), "1")
        try:
            return float(q) > 0
        except ValueError:
            return False
    return False


def _authorized(headers: Mapping[str, str], token: str) -> bool:
    """``Authorization: Bearer <token>``, or Basic with any user name and ``token`` as password."""
    given = headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() == "bearer":
        return hmac.compare_digest(value.strip().encode(), token.encode())
    if scheme.lower() == "basic":
        try:
            password = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return False
        return hmac.compare_digest(password.encode(), token.encode())
    return False


def _headers(head: bytes) -> dict:
    """Request header fields by lower-case name (the last one wins)."""
    out = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def _compile(pattern: str) -> "re.Pattern[str]":
    """``/a/{name}/b`` -> a regex whose group ``name`` matches one raw (still %-encoded) segment."""
    parts = re.split(r"\{(\w+)\}", pattern)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+)" for i, p in enumerate(parts)))
