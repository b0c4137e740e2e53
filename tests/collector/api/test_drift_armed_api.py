"""Whether a rank's drift detector judges yet, where a user looks: ``drift_armed`` per rank in
/api/jobs (false while it warms up and settles, true after), the page's "detector" column,
and ``stepwatch_drift_armed_ranks`` (tests/collector/detect/test_detect_trust.py); once armed,
``drift_reach`` and ``stepwatch_drift_reach_ratio``: what it can raise at the job's noise."""

from __future__ import annotations

import json
import time

import pytest

from collector_testlib import batch, hello
from stepwatch.collector.detect import parse_detection
from stepwatch.collector.tools import top
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

DETECTION = {"warmup_steps": 10, "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 3}}


def steps(first: int, n: int) -> list:
    return [agent_pb2.StepRecord(step=s, end_time_s=1_700_000_000.0 + 0.05 * s, duration_s=0.05,
                                 clock=agent_pb2.STEP_CLOCK_CUDA_EVENT) for s in range(first, first + n)]


def armed(col) -> list:
    return [r["drift_armed"] for j in json.loads(col.get("/api/jobs")[2])["jobs"] for r in j["ranks"]]


def test_api_jobs_says_when_the_drift_detector_is_armed(start_collector):
    col = start_collector(detection=parse_detection(DETECTION))
    with col.channel() as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        # 1 s of steps: inside the warm-up
        list(stub.Connect(iter([hello(job="a", rank=0, session="s1"), batch(1, steps=steps(1, 20))]), timeout=10))
        assert armed(col) == [False]
        # when it arms: 2 s of warm-up and 3 s of settling after its first judged step (11,
        # 0.55 s), from its latest (20, 1.0 s): 4.55 s more of training; the metric and top say so
        (rank,) = [r for j in json.loads(col.get("/api/jobs")[2])["jobs"] for r in j["ranks"]]
        assert rank["drift_armed_in_s"] == pytest.approx(4.55, abs=0.06), rank["drift_armed_in_s"]
        assert 'stepwatch_drift_armed_in_seconds{training_job="a"} 4.5' in col.get("/metrics")[2].decode()
        # (each Connect above ends its stream: the rank reads as ended between them, "unarmed")
        live = {"time": 0.0, "runs": {}, "ranks": {("a", 0): {
            "steps": 20, "live": True, "median_s": 0.05, "wait": 0.0, "gpu": None, "alerts": [],
            "armed": rank["drift_armed"], "armed_in": rank["drift_armed_in_s"]}}}
        assert " in 4s " in top.render(live) and "unarmed" not in top.render(live), top.render(live)
        # 8 s more: warm-up (2 s) and settling (3 s) over
        list(stub.Connect(iter([hello(job="a", rank=0, session="s1"), batch(2, steps=steps(21, 160))]), timeout=10))
        deadline = time.monotonic() + 10  # (detection applies batches after the ack)
        while armed(col) != [True]:
            assert time.monotonic() < deadline, armed(col)
            time.sleep(0.1)
    (rank,) = [r for j in json.loads(col.get("/api/jobs")[2])["jobs"] for r in j["ranks"]]
    # what it can raise now, at this job's noise (perfectly steady steps: each severity's threshold)
    assert {k: round(v, 6) for k, v in rank["drift_reach"].items()} == \
        {"critical": 0.08, "warning": 0.04, "info": 0.021}, rank["drift_reach"]
    metrics = col.get("/metrics")[2].decode()
    assert 'stepwatch_drift_reach_ratio{severity="critical",training_job="a"} 0.08' in metrics \
        or 'stepwatch_drift_reach_ratio{training_job="a",severity="critical"} 0.08' in metrics, \
        [ln for ln in metrics.splitlines() if "reach" in ln]
    page = col.get("/")[2].decode()
    assert '"detector"' in page and "warming up" in page
    # an agent at the defaults (no windows setting sent here: none said) and one on demand
    assert rank["windows"] is None


def test_api_jobs_says_why_windows_run_on_demand_with_the_figures(start_collector):
    col = start_collector()
    with col.channel() as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        hi = hello(job="w", rank=0, session="s1")
        hi.hello.config["windows"] = "on_demand"
        list(stub.Connect(iter([hi, batch(1, steps=steps(1, 5))]), timeout=10))
    (rank,) = [r for j in json.loads(col.get("/api/jobs?job=w")[2])["jobs"] for r in j["ranks"]]
    assert rank["windows"]["mode"] == "on_demand" and "+1.22%" in rank["windows"]["why"], rank["windows"]
    # the steps are stamped 1.7e9 + 0.05 k, the collector's clock is its test clock: the lag says by how much
    assert rank["clock_lag_s"] == round(col.clock.now - (1_700_000_000.0 + 0.05 * 5), 3), rank["clock_lag_s"]


def test_api_jobs_says_a_rank_settles_again_after_a_shift_that_began_before_it_armed(start_collector):
    """Steps 30% slower from 4.9 s, just before arming (the first 10 steps left out, then 2 s of
    warm-up and 3 s of settling: armed at ~5.8 s): the shift is found after arming, its onset
    inside the settling time, so the rank settles again instead of raising; /api/jobs says since
    when (``drift_settling_again_since``) while it does (3 s from that onset: the steps end
    before)."""
    cfg = {"warmup_steps": 10, "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 3,
                                         "critical_window_s": 1, "warning_window_s": 1.5, "info_window_s": 2}}
    col = start_collector(detection=parse_detection(cfg))
    t0, t, records = 1_700_000_000.0, 1_700_000_000.0, []
    for s in range(1, 136):  # 4.9 s at 50 ms, then 30% slower: ~7.3 s in all
        d = 0.05 if t - t0 < 4.9 else 0.065
        t += d
        records.append(agent_pb2.StepRecord(step=s, end_time_s=t, duration_s=d, clock=agent_pb2.STEP_CLOCK_CUDA_EVENT))
    with col.channel() as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        list(stub.Connect(iter([hello(job="h", rank=0, session="s1"), batch(1, steps=records)]), timeout=10))
    deadline = time.monotonic() + 10  # (detection applies batches after the ack)
    while True:
        (rank,) = [r for j in json.loads(col.get("/api/jobs")[2])["jobs"] for r in j["ranks"]]
        if rank["drift_settling_again_since"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rank["drift_armed"] is False and rank["drift_reach"] is None, rank
    assert 4.4 <= rank["drift_settling_again_since"] - t0 <= 5.4, rank["drift_settling_again_since"] - t0
    assert json.loads(col.get("/api/alerts")[2])["alerts"] == []


def test_a_rank_that_ended_before_arming_says_so_with_the_setting_for_short_jobs(start_collector):
    col = start_collector(detection=parse_detection(DETECTION))
    with col.channel() as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        list(stub.Connect(iter([hello(job="short", rank=0, session="s1"), batch(1, steps=steps(1, 40))]),
                          timeout=10))
    deadline = time.monotonic() + 10
    while True:  # (the stream's end reaches the state after the call returns)
        (rank,) = [r for j in json.loads(col.get("/api/jobs")[2])["jobs"] for r in j["ranks"]]
        if not rank["connected"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rank["drift_armed"] is False and rank["connected"] is False
    table = top.render(top.read(col.collector.http_address))
    assert "unarmed" in table and "detection.drift.warmup_s + settle_s" in table, table
    assert "ended before arming" in col.get("/")[2].decode()
