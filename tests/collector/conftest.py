"""Fixtures: a real Collector on 127.0.0.1:0 driven from a background event-loop thread."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from typing import Optional

import grpc
import pytest

from stepwatch.collector._app import Collector
from stepwatch.collector._config import CollectorSettings


class FakeClock:
    """A settable clock in Unix seconds."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class LoopThread:
    """An asyncio loop on a daemon thread; ``call(coro)`` runs a coroutine there and waits."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def call(self, coro, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Running:
    """A started collector plus helpers to talk to it."""

    def __init__(self, loop: LoopThread, collector: Collector, clock: FakeClock):
        self.loop, self.collector, self.clock = loop, collector, clock

    def channel(self, **options) -> grpc.Channel:
        return grpc.insecure_channel(self.collector.grpc_address, options=list(options.items()))

    def get(self, path: str, headers: Optional[dict] = None) -> tuple[int, str, bytes]:
        req = urllib.request.Request(f"http://{self.collector.http_address}{path}", headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.headers.get("Content-Type"), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type"), exc.read()


@pytest.fixture
def start_collector(tmp_path):
    """Factory: ``start_collector(process_wide=False, **settings_overrides) -> Running``;
    stopped at teardown."""
    loop = LoopThread()
    started = []

    def start(process_wide: bool = False, **overrides) -> Running:
        clock = FakeClock()
        # capture_every_s 0: tests capture a job many times (the rate limit has its own test)
        settings = CollectorSettings(**{"grpc_listen": "127.0.0.1:0", "http_listen": "127.0.0.1:0", "capture_every_s": 0,
                                        "trace_store_dir": str(tmp_path / f"collector-traces-{len(started)}"),
                                        **overrides})
        collector = Collector(settings, clock=clock, process_wide=process_wide)
        loop.call(collector.start())
        started.append(collector)
        return Running(loop, collector, clock)

    yield start
    for collector in started:
        loop.call(collector.stop(grace_s=0))
    loop.close()


@pytest.fixture
def collector(start_collector) -> Running:
    return start_collector()
