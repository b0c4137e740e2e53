"""The asyncio HTTP server through real sockets: routes, 404, 405, 400; /metrics off the event
loop, gzip and OpenMetrics."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import urllib.request

import pytest


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


def _get(collector, path, headers):
    req = urllib.request.Request(f"http://{collector.collector.http_address}{path}", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers, resp.read()


def _steady(body: bytes) -> list:
    """The body without what moves between two scrapes by itself: the collector's and the
    process's measurements of themselves (loop lag, scrape and housekeeping times, gc, CPU,
    memory). Every HELP and TYPE line stays, and every series of the jobs."""
    return [line for line in body.splitlines()
            if not line.startswith((b"stepwatch_collector_", b"process_", b"python_"))]


def test_metrics_gzip_and_openmetrics_on_request(collector):
    plain = collector.get("/metrics")[2]
    headers, body = _get(collector, "/metrics", {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and _steady(gzip.decompress(body)) == _steady(plain)
    headers, body = _get(collector, "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert headers["Content-Type"].startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    # what a header refuses (q=0) or names only as part of another token is not taken
    headers, body = _get(collector, "/metrics", {"Accept-Encoding": "gzip;q=0, identity",
                                                 "Accept": "application/openmetrics-text;q=0, text/plain"})
    assert "Content-Encoding" not in headers and headers["Content-Type"].startswith("text/plain"), headers
    headers, _ = _get(collector, "/metrics", {"Accept-Encoding": "x-gzip-not, br"})
    assert "Content-Encoding" not in headers
    headers, _ = _get(collector, "/metrics", {"Accept-Encoding": "br, GZIP ; q=0.5"})
    assert headers["Content-Encoding"] == "gzip"


class _SlowCollector:
    """A registry collector whose scrape takes ``seconds`` (a very large state)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def collect(self):
        time.sleep(self.seconds)
        yield from ()


def test_a_slow_scrape_blocks_neither_acks_nor_healthz(collector):
    """/metrics renders on the HTTP worker thread: during a 3 s scrape a batch is acked and
    /healthz answers at once (both used to wait for the scrape on the event loop)."""
    from collector_testlib import batch, hello, step
    from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc

    collector.collector.registry.register(_SlowCollector(3.0))
    scrape = threading.Thread(target=collector.get, args=("/metrics",))
    began = time.monotonic()
    scrape.start()
    time.sleep(0.3)  # the scrape is under way
    t0 = time.monotonic()
    assert collector.get("/healthz")[0] == 200
    healthz_s = time.monotonic() - t0
    with collector.channel() as chan:
        t0 = time.monotonic()
        acks = list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter([hello(), batch(1, steps=[step(1)])]),
                                                                   timeout=10))
        ack_s = time.monotonic() - t0
    scrape.join(10)
    assert [a.ack.seq for a in acks] == [1]
    assert time.monotonic() - began >= 3.0, "the scrape really was slow"
    assert healthz_s < 1.0 and ack_s < 1.0, (healthz_s, ack_s)


def test_http_token_guards_metrics_and_api_but_not_healthz(start_collector):
    import base64
    import urllib.error

    running = start_collector(http_token="scrape-me")
    assert running.get("/healthz")[0] == 200  # probes stay open
    for path in ("/metrics", "/api/jobs", "/api/alerts", "/"):
        status, _, body = running.get(path)
        assert status == 401 and b"http_token" in body, (path, status)
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(running, "/metrics", {"Authorization": "Bearer wrong"})
    assert err.value.code == 401 and err.value.headers["WWW-Authenticate"].startswith("Basic")
    assert b"stepwatch_collector" in _get(running, "/metrics", {"Authorization": "Bearer scrape-me"})[1]
    basic = base64.b64encode(b"prometheus:scrape-me").decode()
    assert _get(running, "/api/jobs", {"Authorization": f"Basic {basic}"})[1].startswith(b"{")


def _sample(text: str, name: str) -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_metrics_show_the_collector_processes_garbage_collections(start_collector):
    """Full collections stop ingest and acks; /metrics shows their count, time and longest (a
    collector in its own process: process_wide)."""
    import gc

    collector = start_collector(process_wide=True)

    before = collector.get("/metrics")[2].decode()
    n0 = _sample(before, 'stepwatch_collector_gc_collections_total{generation="2"}')
    junk = [[i] for i in range(200_000)]  # something for the collection to walk
    gc.collect()
    del junk
    after = collector.get("/metrics")[2].decode()
    assert _sample(after, 'stepwatch_collector_gc_collections_total{generation="2"}') >= n0 + 1
    assert _sample(after, 'stepwatch_collector_gc_seconds_total{generation="2"}') > 0
    longest = _sample(after, 'stepwatch_collector_gc_pause_max_seconds{generation="2"}')
    assert 0 < longest <= _sample(after, 'stepwatch_collector_gc_seconds_total{generation="2"}')


def test_metrics_show_event_loop_lag_and_housekeeping_time(collector):
    """A 0.4 s stall of the event loop (what a long tick or collection does to every ack) shows
    in stepwatch_collector_loop_lag_seconds above the 0.25 s bucket; housekeeping ticks are
    timed into stepwatch_collector_housekeeping_seconds."""

    def stalled_over_025(text):
        inf = _sample(text, 'stepwatch_collector_loop_lag_seconds_bucket{le="+Inf"}')
        return inf - _sample(text, 'stepwatch_collector_loop_lag_seconds_bucket{le="0.25"}')

    before = collector.get("/metrics")[2].decode()

    async def stall():
        time.sleep(0.4)  # blocks the loop, as a slow handler would

    collector.loop.call(stall())
    deadline = time.monotonic() + 5
    while True:
        after = collector.get("/metrics")[2].decode()
        if stalled_over_025(after) > stalled_over_025(before) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert stalled_over_025(after) == stalled_over_025(before) + 1
    assert _sample(after, "stepwatch_collector_loop_lag_seconds_count") > \
        _sample(before, "stepwatch_collector_loop_lag_seconds_count")
    tick_s = collector.collector.tick_s
    time.sleep(tick_s + 0.5)
    later = collector.get("/metrics")[2].decode()
    assert _sample(later, "stepwatch_collector_housekeeping_seconds_count") >= 1
    assert _sample(later, "stepwatch_collector_housekeeping_seconds_sum") > 0
