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
    # (two steps a second apart: no span of 10 s has closed, so nothing since the start yet)
    assert doc["ranks"] == [{"rank": 1, "points": [[1, T0 + 1, 0.5], [2, T0 + 2, 0.25]], "life": []}]


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
    runs = [j.pop("run") for j in doc["jobs"]]  # each job's live run, not settled yet
    assert doc == {"jobs": [
        {"job": "big", "ranks": 3, "connected": 0, "step_median_s": 0.2, "slowest_rank": 1,
         "slowest_step_median_s": 0.3},
        {"job": "small", "ranks": 1, "connected": 0, "step_median_s": None, "slowest_rank": None,
         "slowest_step_median_s": None}]}
    assert [(r["run"], r["settled_step_s"], r["ratio"]) for r in runs] == [("s1", None, None), ("s1", None, None)]
    full = json.loads(collector.get("/api/jobs")[2])
    assert sum(len(j["ranks"]) for j in full["jobs"]) == 4 and len(full["jobs"]) == 2


def test_steps_can_be_asked_for_the_lowest_ranks_only(collector):
    """The page draws 32 lines: it asks for those ranks' trends, not a whole big job's (a 64-rank
    job's answer was about 1 MB a refresh at 10,000 ranks, bench/results/collector_scale_polled.md)."""
    for rank in (3, 0, 2, 1):
        stream(collector, hello(job="big", rank=rank), batch(1, steps=[step(1, duration=0.1 + rank)]))
    doc = json.loads(collector.get("/api/steps?job=big&ranks=2")[2])
    assert [r["rank"] for r in doc["ranks"]] == [0, 1], doc
    assert [r["rank"] for r in json.loads(collector.get("/api/steps?job=big")[2])["ranks"]] == [0, 1, 2, 3]
    for bad in ("0", "-1", "x", "1e3", "²"):
        status, _, body = collector.get("/api/steps?job=big&ranks=" + quote(bad))
        assert status == 400 and b"ranks= must be a whole number" in body, (bad, status, body)


def test_the_jobs_answer_encoded_in_chunks_is_the_bytes_of_one_encoding():
    """/api/jobs is encoded 64 ranks per call (one call held the GIL for a whole fleet's 21 MB):
    the bytes are exactly those of one json.dumps of the document, NaN mapped to null, odd job
    names escaped, across chunk edges, for the whole list and for one job."""
    from stepwatch.collector.api import _json_routes as routes

    state = CollectorState(60.0)
    pipe = Pipeline(state, [])
    for job, ranks in (('a "quoted"\n job', 3), ("big", 150), ("small", 1)):
        for rank in range(ranks):
            h = hello(job=job, rank=rank).hello
            key = pipe.connect(h, T0)
            pipe.batch(key, h, agent_pb2.Batch(seq=1, steps=[step(1, duration=0.1 + rank / 1e3)]), T0)
    for job in (None, "big", "nope"):
        doc = routes.jobs_document(state, job)
        one = json.dumps(routes._finite(doc), allow_nan=False).encode()
        assert routes.jobs_json(state, job) == one, job
        for chunk in (1, 7, 64, 100):  # snapshot chunks that end inside a job, at its edge, past it
            pauses = []
            assert routes.jobs_json(state, job, chunk=chunk, pause=lambda: pauses.append(1)) == one, (job, chunk)
            held = sum(len(j["ranks"]) for j in doc["jobs"])
            assert len(pauses) == -(-held // chunk), (job, chunk, len(pauses))  # a pause per chunk
    assert sum(len(j["ranks"]) for j in json.loads(routes.jobs_json(state))["jobs"]) == 154
