"""Damage that still decodes does not lose data: a batch whose seq had one bit flipped (11 ->
75), or jumped to the top of the range, over real gRPC against a collector."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import batch, hello, step
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


def metric(text, name):
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)


def send(col, job, seqs, order=None, steps_per_batch=10):
    """The i-th message (1-based) is batch ``order[i - 1]`` (default i) with its steps; its seq
    on the wire is ``seqs[i - 1]``."""
    order = order or range(1, len(seqs) + 1)
    msgs = [hello(job=job)] + [batch(seq, steps=[step(n) for n in range((i - 1) * steps_per_batch + 1,
                                                                       i * steps_per_batch + 1)])
                               for i, seq in zip(order, seqs)]
    with col.channel() as chan:
        acks = list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(msgs), timeout=30))
    return [a.ack.seq for a in acks]


def steps_applied(col, job):
    """Steps the collector took in (its step-time histogram's count for the job)."""
    text = col.get("/metrics")[2].decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "stepwatch_step_duration_seconds_count" and s.labels.get("training_job") == job)


def test_a_flipped_bit_in_one_seq_loses_nothing(start_collector):
    col = start_collector()
    seqs = list(range(1, 501))
    seqs[10] = 75  # batch 11 says 75; batches 12..500 follow as sent
    acks = send(col, "flip", seqs)
    assert acks == seqs  # every batch acknowledged, none blocks the session
    assert steps_applied(col, "flip") == 500 * 10  # was 5,000 - 630 (batches 12-74 and 75 dropped)
    text = col.get("/metrics")[2].decode()
    assert metric(text, "stepwatch_collector_batches_duplicate_total") == 0


def test_a_seq_at_the_top_of_the_range_is_refused_and_counted_and_the_session_goes_on(start_collector):
    col = start_collector()
    seqs = list(range(1, 101))
    seqs[10] = 2 ** 64 - 1
    seqs[20] = 10 ** 12  # far ahead of 20
    acks = send(col, "top", seqs)
    assert acks == seqs
    assert steps_applied(col, "top") == 100 * 10 - 20  # only the two damaged batches' steps are missing
    text = col.get("/metrics")[2].decode()
    assert metric(text, "stepwatch_collector_batches_seq_refused_total") == 2


def test_a_resent_batch_is_still_a_duplicate(start_collector):
    col = start_collector()
    acks = send(col, "dup", [1, 2, 3, 2, 3, 4], order=[1, 2, 3, 2, 3, 4])  # 2 and 3 resent as they were
    assert acks == [1, 2, 3, 2, 3, 4]
    text = col.get("/metrics")[2].decode()
    assert metric(text, "stepwatch_collector_batches_duplicate_total") == 2


def test_a_batch_far_larger_than_any_agent_seals_is_refused_and_counted(start_collector):
    """126,000 steps in one batch (the size of a 4 MB message) would hold every other agent's
    acks while applied: refused as malformed (the agent moves such a batch aside), counted,
    and the next stream is served."""
    import grpc
    import pytest

    col = start_collector(max_message_bytes=16 << 20)
    huge = batch(1, steps=[step(n) for n in range(1, 30_001)])
    with col.channel(**{"grpc.max_send_message_length": 16 << 20}) as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Connect(iter([hello(job="huge"), huge]), timeout=30))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed AgentMessage: a batch of 30000 steps" in err.value.details()
        acks = list(stub.Connect(iter([hello(job="huge", session="s2"), batch(1, steps=[step(1)])]), timeout=30))
        assert [a.ack.seq for a in acks] == [1]
    text = col.get("/metrics")[2].decode()
    assert 'stepwatch_collector_streams_rejected_total{reason="batch_too_large"} 1' in text
