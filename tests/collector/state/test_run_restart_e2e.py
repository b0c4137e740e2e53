"""A job that restarted while its collector was down: real collector processes on loopback, real
gRPC, the run records on disk under ``--state-dir``, the first collector killed with SIGKILL."""

from __future__ import annotations

import queue
import sqlite3
import time

import grpc
from collector_testlib import batch, hello, step

from _procs import Collector
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc

JOB = "restarted"


def _rank(col: Collector, rank: int, session: str) -> tuple:
    """Rank ``rank`` of a 2-rank job connects under ``session`` and has one batch acknowledged."""
    q: "queue.Queue" = queue.Queue()
    q.put(hello(job=JOB, rank=rank, session=session))
    chan = grpc.insecure_channel(col.grpc)
    replies = agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(q.get, None), timeout=30)
    q.put(batch(1, steps=[step(1)]))
    assert next(replies).ack.seq == 1
    return chan, q


def _wait_stored(state, run: str, timeout_s: float = 30.0) -> None:
    """Until the run store's file on disk holds ``run``'s record."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            db = sqlite3.connect(f"file:{state / 'detection.sqlite'}?mode=ro", uri=True, timeout=1)
            try:
                if db.execute("SELECT 1 FROM runs WHERE job = ? AND run = ?", (JOB, run)).fetchall():
                    return
            finally:
                db.close()
        except sqlite3.Error:
            pass  # (not made yet, or being written)
        time.sleep(0.1)
    raise AssertionError(f"run {run} not stored within {timeout_s} s")


def test_the_first_rank_back_of_a_job_that_restarted_meanwhile_is_in_its_new_run(tmp_path):
    """Rank 0 starts the run (its record written at once); rank 1 joins and the collector is
    killed before the tick that writes it (ticks every 120 s here). The job restarts while the
    collector is down: rank 1 comes back first under a new session, then rank 0. The stored run
    keeps rank 0 alone and ends; the new run holds both ranks, rank 1 under its new session."""
    state = tmp_path / "state"
    first = Collector(tmp_path, ["--state-dir", str(state), "--detection", "{eval_interval_s: 120}"]).start()
    opened = [_rank(first, 0, "s0")]
    _wait_stored(state, "s0")  # (the run store's writer flushes its pending records every second)
    opened.append(_rank(first, 1, "s1"))
    first.kill()
    for chan, _ in opened:
        chan.close()

    second = Collector(tmp_path, ["--state-dir", str(state)]).start()
    try:
        opened = [_rank(second, 1, "t1"), _rank(second, 0, "t0")]
        runs = second.api(f"/api/jobs/{JOB}/runs")["runs"]
        assert [(r["run"], sorted(r["ranks"]), r.get("live", False)) for r in runs] == [
            ("s0", ["0"], False), ("t0", ["0", "1"], True)], runs
        assert runs[0]["ended_at"] is not None and runs[1]["ranks"]["1"]["session"] == "t1", runs
        for chan, q in opened:
            q.put(None)
            chan.close()
    finally:
        second.kill()
