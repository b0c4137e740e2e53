"""Pacing: a collector with more agents than ``max_batches_per_s`` asks them, in every
acknowledgement, to send a batch only every (agents / max) seconds; the real sidecar follows
the ask (and caps it), no step lost. Real gRPC on loopback, a real trainer and sidecar."""

from __future__ import annotations

import queue
import time

from collector_testlib import batch, hello, step
from prometheus_client.parser import text_string_to_metric_families

from _procs import Collector, run_trainer, trainer_env
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


ASK = "stepwatch_collector_agent_batch_interval_ask_seconds"


def _ask(col) -> float:
    (value,) = [s.value for fam in text_string_to_metric_families(col.get("/metrics")[2].decode())
                for s in fam.samples if s.name == ASK]
    return value


def _open(chan, rank):
    q: "queue.Queue" = queue.Queue()
    q.put(hello(rank=rank, session=f"s{rank}"))
    return q, agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(q.get, None), timeout=20)


def test_acks_ask_for_a_longer_interval_once_agents_outnumber_the_planned_rate(start_collector):
    col = start_collector(max_batches_per_s=2)
    with col.channel() as chan:
        streams = [_open(chan, rank) for rank in range(5)]
        for rank, (q, replies) in enumerate(streams):  # the acks answer in turn, all five open
            q.put(batch(1, steps=[step(1)]))
            ack = next(replies).ack
            assert ack.seq == 1
        assert ack.batch_interval_ask_s == 3.0  # ceil(5 / 2)
        assert _ask(col) == 3.0
        for q, replies in streams[2:]:  # three leave: 2 agents, no more than planned
            q.put(None)
            assert list(replies) == []
        q, replies = streams[0]
        q.put(batch(2, steps=[step(2)]))
        assert next(replies).ack.batch_interval_ask_s == 0.0
        assert _ask(col) == 0.0
        for q, _ in streams[:2]:
            q.put(None)


def test_a_real_sidecar_follows_the_ask_and_loses_no_step(tmp_path):
    """One agent against max_batches_per_s 0.25: the ask is 4 s. The trainer's own interval is
    0.2 s (about 60 batches in its ~12 s); paced, the collector gets a handful, and every step."""
    col = Collector(tmp_path, ["--max-batches-per-s", "0.25"]).start()
    try:
        t0 = time.monotonic()
        run_trainer(trainer_env(tmp_path, col.grpc, "paced"), "--steps", "240", "--step-sleep-s", "0.05")
        took = time.monotonic() - t0
        col.wait_value("stepwatch_steps_total", 240, training_job="paced", rank=0)
        batches = col.value("stepwatch_collector_batches_received_total")
        assert col.value(ASK) == 0.0  # it left
        # the first batch (before any ack), one per 4 s after it, the last one at exit
        assert 2 <= batches <= took / 4 + 4, (batches, took)
    finally:
        col.kill()
