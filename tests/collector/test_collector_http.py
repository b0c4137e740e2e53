"""The asyncio HTTP server through real sockets: routes, 404, 405, 400."""

from __future__ import annotations

import json
import socket


def raw(running, request: bytes) -> bytes:
    host, port = running.collector.http_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_healthz_and_empty_jobs(collector):
    assert collector.get("/healthz")[::2] == (200, b"ok\n")
    status, ctype, body = collector.get("/api/jobs?pretty=1")
    assert status == 200 and ctype == "application/json" and json.loads(body) == {"jobs": []}


def test_unknown_path_is_404(collector):
    assert collector.get("/nope")[0] == 404


def test_post_is_405_with_allow(collector):
    reply = raw(collector, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: GET\r\n" in reply and b"Connection: close" in reply


def test_garbage_is_400(collector):
    assert raw(collector, b"HELLO\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(collector, b"GET /metrics SPDY/9\r\n\r\n").startswith(b"HTTP/1.1 400 ")


def test_client_that_hangs_up_does_not_break_server(collector):
    host, port = collector.collector.http_address.rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=5).close()
    assert collector.get("/healthz")[0] == 200


def test_stop_is_idempotent(start_collector):
    running = start_collector()
    running.loop.call(running.collector.stop(grace_s=0))
    running.loop.call(running.collector.stop(grace_s=0))
