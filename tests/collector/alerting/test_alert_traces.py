"""Which slowdown episodes ask the rank for an early window and which for a full trace."""

from __future__ import annotations

import math
import random

from collector_testlib import columns
from stepwatch.collector.alerting import Detection
from stepwatch.collector.detect import parse_detection
from stepwatch.proto.stepwatch.v1 import agent_pb2

HELLO = agent_pb2.Hello(job="j", rank=0, session_id="s", host="h", pid=1)


def drive(levels, trace_min_severity=None):
    """40 ms steps at 1.0 then each (factor, steps) in turn; returns (windows, traces) asked for."""
    extra = {"trace_min_severity": trace_min_severity} if trace_min_severity else {}
    cfg = parse_detection({"warmup_steps": 10, "resolve_hold_s": 600, **extra,
                           "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 6, "critical_window_s": 2, "warning_window_s": 3, "info_window_s": 6, "clear_s": 1, "z": 3}})
    windows, traces = [], []
    det = Detection(cfg, log_changes=False,
                    request_window=lambda job, rank, why: windows.append(why) or True,
                    request_trace=lambda job, rank, steps: traces.append(steps) or f"t{len(traces)}")
    rng, now, step = random.Random(2), 1e9, 0
    det.on_connect(HELLO, now)
    for factor, n in [(1.0, 600)] + list(levels):
        batch = agent_pb2.Batch(seq=step + 1)
        for _ in range(n):
            step += 1
            dt = 0.04 * factor * math.exp(rng.gauss(0, 0.005))
            now += dt
            batch.steps.add(step=step, end_time_s=now, duration_s=dt)
            if len(batch.steps) == 20:
                det.on_batch(HELLO, batch, now, *columns(batch))
                det.tick(now, [("j", 0, True, None)])
                batch = agent_pb2.Batch(seq=step + 1)
    return windows, traces, [(a.alertname, [s for _, s in a.history]) for a in det.book.firing()]


def test_an_info_episode_asks_for_a_window_and_no_trace():
    windows, traces, firing = drive([(1.035, 600)])
    assert firing == [("StepwatchThroughputDrift", ["info"])], firing
    assert windows == ["StepwatchThroughputDrift"] and traces == []


def test_an_episode_that_grows_to_warning_gets_its_trace_then():
    windows, traces, firing = drive([(1.035, 600), (1.065, 600)])
    assert firing == [("StepwatchThroughputDrift", ["info", "warning"])], firing
    assert windows == ["StepwatchThroughputDrift"] and traces == [5]


def test_trace_min_severity_info_traces_at_once():
    _, traces, _ = drive([(1.035, 600)], trace_min_severity="info")
    assert traces == [5]


def test_a_bad_trace_min_severity_is_a_clear_error():
    import pytest
    with pytest.raises(ValueError, match="trace_min_severity.*expected info, warning or critical"):
        parse_detection({"trace_min_severity": "loud"})
