"""The whole fleet's /api/jobs is built at most once per (1 + share) x its build time, so polling
it cannot take more than a quarter of the core ingest needs; small answers are always fresh."""

from __future__ import annotations

import gc
import json

import pytest

from collector_testlib import batch, hello, step
from stepwatch.collector.api._json_routes import SharedRender
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_slow_answer_is_shared_for_share_times_its_build_time():
    clock = Clock()
    shared = SharedRender(share=3.0, slow_s=0.1, clock=clock)
    builds = []

    def render():  # takes 2 s of the (fake) clock
        builds.append(clock.now)
        clock.now += 2.0
        return f"body {len(builds)}".encode()

    assert shared.get("jobs", render) == b"body 1"  # built 100-102, fresh until 108
    clock.now = 107.9
    assert shared.get("jobs", render) == b"body 1"
    clock.now = 108.0
    assert shared.get("jobs", render) == b"body 2"
    # polled every 0.5 s for 60 s: the builds take at most a quarter of the time
    for _ in range(120):
        clock.now += 0.5
        shared.get("jobs", render)
    cycles = len(builds) - 1  # build to build
    assert cycles >= 10 and 2.0 * cycles / (builds[-1] - builds[0]) <= 0.25 + 1e-9, builds
    assert shared.get("other", lambda: b"x") == b"x"  # keys apart


def test_a_fast_answer_is_built_for_every_request():
    clock = Clock()
    shared = SharedRender(share=3.0, slow_s=0.1, clock=clock)
    n = []

    def render():
        n.append(1)
        clock.now += 0.01
        return str(len(n)).encode()

    assert [shared.get("jobs", render) for _ in range(3)] == [b"1", b"2", b"3"]


def test_a_small_fleet_sees_its_new_rank_at_once(collector):
    """Through the real collector: /api/jobs read, a rank connects, /api/jobs shows it."""
    assert json.loads(collector.get("/api/jobs")[2]) == {"jobs": []}
    with collector.channel() as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        list(stub.Connect(iter([hello(job="fresh", rank=0), batch(1, steps=[step(1)])]), timeout=10))
    doc = json.loads(collector.get("/api/jobs")[2])
    assert [j["job"] for j in doc["jobs"]] == ["fresh"]
    assert json.loads(collector.get("/api/jobs?summary=1")[2])["jobs"][0]["ranks"] == 1


def test_no_automatic_collection_runs_while_an_answer_builds_and_it_is_back_after():
    """A build's short-lived dicts set off full collections of the whole state otherwise; a
    build that raises gives collection back too."""
    seen = []
    shared = SharedRender()
    assert gc.isenabled()
    assert shared.get("jobs", lambda: seen.append(gc.isenabled()) or b"{}") == b"{}"
    assert seen == [False] and gc.isenabled()

    def broken():
        raise RuntimeError("render failed")

    with pytest.raises(RuntimeError):
        shared.get("jobs2", broken)
    assert gc.isenabled()
