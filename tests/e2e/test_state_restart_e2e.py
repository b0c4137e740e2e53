"""A collector SIGKILLed in the middle of a slow ramp, restarted on the same ``state_dir``: the
ranks' settled level survives, so the ramp is raised against the level the job settled at
before the kill. Real collector processes, real gRPC; the steps carry their own (data) times,
so ten minutes of a 40 ms job are sent in seconds."""

from __future__ import annotations

import math
import random
import sqlite3
import time

import grpc

from _procs import Collector
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

T0 = time.time() - 7200  # the job's steps are two hours old: data time, not the wall clock


def _send(col, session, seq, step, now, seconds, level, rng):
    """``seconds`` of 40 ms steps at ``level(t)`` in batches of 500; returns (seq, step, now)."""
    msgs = [agent_pb2.AgentMessage(hello=agent_pb2.Hello(job="ramp", rank=0, world_size=1, host="node-a",
                                                         pid=4242, session_id=session))]
    end = now + seconds
    while now < end:
        seq += 1
        batch = agent_pb2.Batch(seq=seq)
        for _ in range(500):
            step += 1
            dt = 0.04 * level(now - T0) * math.exp(rng.gauss(0, 0.01))
            now += dt
            batch.steps.add(step=step, end_time_s=now, duration_s=dt)
        msgs.append(agent_pb2.AgentMessage(batch=batch))
    with grpc.insecure_channel(col.grpc) as chan:
        list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(msgs), timeout=60))
    return seq, step, now


def _saved(path) -> bool:
    db = sqlite3.connect(str(path), timeout=1.0)
    try:
        return db.execute("SELECT COUNT(*) FROM drift WHERE job = 'ramp'").fetchone()[0] == 1
    except sqlite3.Error:  # (the table not made yet)
        return False
    finally:
        db.close()


def test_sigkill_mid_ramp_keeps_the_settled_level(tmp_path):
    state = tmp_path / "state"
    col = Collector(tmp_path, ["--state-dir", str(state), "--detection", "{eval_interval_s: 0.5}"]).start()
    ramp = lambda t: 1.0 + 0.06 * min(1.0, max(0.0, t - 360) / 600)  # noqa: E731
    rng = random.Random(3)
    seq, step, now = _send(col, "s1", 0, 0, T0, 480, ramp, rng)  # settled, then 2 min of ramp
    deadline = time.monotonic() + 20
    while not (state / "detection.sqlite").exists() or col.value("stepwatch_drift_armed_ranks", training_job="ramp") != 1:
        assert time.monotonic() < deadline, "the rank was never armed and saved"
        time.sleep(0.2)
    while not _saved(state / "detection.sqlite"):  # a housekeeping tick saves it, the store's thread writes it
        assert time.monotonic() < deadline, "the rank's state was never written"
        time.sleep(0.2)
    assert col.api("/api/alerts")["alerts"] == []
    col.kill()  # SIGKILL in the middle of the ramp
    col.start()
    _send(col, "s1", seq, step, now, 900, ramp, rng)
    deadline = time.monotonic() + 20
    alerts = []
    while not alerts and time.monotonic() < deadline:
        alerts = [a for a in col.api("/api/alerts")["alerts"] if a["alertname"] == "StepwatchThroughputDrift"]
        time.sleep(0.3)
    assert alerts, "the ramp was not raised after the restart"
    summary = alerts[0]["summary"]
    assert "vs this job's level settled at" in summary and "(40.0 ms" in summary, summary
    col.kill()
