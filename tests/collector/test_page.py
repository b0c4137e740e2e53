"""The ``/`` page, the ``/api`` index and ``/api/steps`` (the trend ring) through a real collector."""

from __future__ import annotations

import json
import urllib.request
from urllib.parse import quote

from collector_testlib import batch, hello, step
from stepwatch.collector.ingest._pipeline import Pipeline
from stepwatch.collector.state._state import TREND_POINTS, CollectorState
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

T0 = 1_700_000_000.0


def stream(running, *messages):
    with running.channel() as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        list(stub.Connect(iter(messages), timeout=10))


def test_page_is_html_with_no_store_and_csp(collector):
    with urllib.request.urlopen(f"http://{collector.collector.http_address}/", timeout=5) as resp:
        body, headers = resp.read().decode(), resp.headers
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Cache-Control"] == "no-store"
    assert "script-src 'sha256-" in headers["Content-Security-Policy"]
    assert body.startswith("<!doctype html>") and 'id="jobs"' in body


def test_index_lists_routes(collector):
    status, ctype, body = collector.get("/api")
    routes = json.loads(body)["routes"]
    assert status == 200 and ctype == "application/json"
    assert {"/", "/api", "/api/jobs", "/api/steps", "/metrics", "/healthz"} <= set(routes)


def test_steps_needs_job_and_unknown_job_is_empty(collector):
    assert collector.get("/api/steps")[0] == 400
    status, _, body = collector.get("/api/steps?job=nope")
    assert status == 200 and json.loads(body) == {"job": "nope", "ranks": []}


def test_steps_reports_points_per_rank_for_an_odd_job_name(collector):
    job = "a/b <script>&?=x"
    stream(collector, hello(job=job, rank=1), batch(1, steps=[step(1, duration=0.5), step(2, duration=0.25)]))
    status, _, body = collector.get("/api/steps?job=" + quote(job, safe=""))
    doc = json.loads(body)
    assert status == 200 and doc["job"] == job
    assert doc["ranks"] == [{"rank": 1, "points": [[1, T0 + 1, 0.5], [2, T0 + 2, 0.25]]}]


def test_trend_is_bounded_and_skips_bad_durations():
    state = CollectorState(60.0)
    pipe = Pipeline(state, [])
    h = hello().hello
    key = pipe.connect(h, T0)
    steps = [step(n, duration=0.01 * n) for n in range(1, TREND_POINTS + 51)]
    steps += [step(9999, duration=float("nan")), step(9998, duration=-1.0)]
    assert pipe.batch(key, h, agent_pb2.Batch(seq=1, steps=steps), T0)  # the NaN step dropped, counted
    assert pipe.counters["nonfinite_records"] == 1
    (rank,) = state.snapshot()
    assert len(rank.trend) == TREND_POINTS
    assert rank.trend[0][0] == 51 and rank.trend[-1][0] == TREND_POINTS + 50


def test_jobs_summary_is_one_line_per_job_whatever_its_ranks(collector):
    """``/api/jobs?summary=1`` (the page's overview): per job its rank count, connected ranks,
    the median of its ranks' step medians and its slowest rank, in a body that does not grow
    with the ranks; ``/api/jobs`` still lists every rank."""
    for rank, duration in ((0, 0.10), (1, 0.30), (2, 0.20)):
        stream(collector, hello(job="big", rank=rank), batch(1, steps=[step(1, duration=duration),
                                                                       step(2, duration=duration)]))
    stream(collector, hello(job="small", rank=0))
    status, ctype, body = collector.get("/api/jobs?summary=1")
    doc = json.loads(body)
    assert status == 200 and ctype == "application/json"
    assert doc == {"jobs": [
        {"job": "big", "ranks": 3, "connected": 0, "step_median_s": 0.2, "slowest_rank": 1,
         "slowest_step_median_s": 0.3},
        {"job": "small", "ranks": 1, "connected": 0, "step_median_s": None, "slowest_rank": None,
         "slowest_step_median_s": None}]}
    full = json.loads(collector.get("/api/jobs")[2])
    assert sum(len(j["ranks"]) for j in full["jobs"]) == 4 and len(full["jobs"]) == 2
