"""A stream that never sends its Hello is closed after HELLO_TIMEOUT_S and counted; an agent
that says hello in time is served (real gRPC against an in-process collector)."""

from __future__ import annotations

import queue
import time

import grpc
import pytest

from collector_testlib import batch, hello, step
from stepwatch.collector.ingest import _grpc_server as _server
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


def test_a_stream_without_a_hello_is_closed_and_counted(start_collector, monkeypatch):
    monkeypatch.setattr(_server, "HELLO_TIMEOUT_S", 0.5)
    running = start_collector()
    silent: queue.Queue = queue.Queue()

    def never():  # a client that opens the stream and sends nothing
        item = silent.get()
        if item is not None:
            yield item

    t0 = time.monotonic()
    with running.channel() as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Connect(never(), timeout=20))
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "no Hello within" in err.value.details()
        assert time.monotonic() - t0 < 10
        acks = list(stub.Connect(iter([hello(), batch(1, steps=[step(1)])]), timeout=20))
        assert [a.ack.seq for a in acks] == [1]
    silent.put(None)
    text = running.get("/metrics")[2].decode()
    assert [l for l in text.splitlines() if "hello_timeout" in l] == [
        'stepwatch_collector_streams_rejected_total{reason="hello_timeout"} 1.0'], [l for l in text.splitlines() if "rejected" in l]


def test_hello_only_streams_time_out_and_free_their_job_slots(start_collector, monkeypatch):
    """With max_jobs 3, three streams of three jobs that say hello and never send a Batch hold
    every job slot only until FIRST_BATCH_TIMEOUT_S: they are closed (DEADLINE_EXCEEDED,
    counted "no_batch"), their ranks forgotten at once, and a real job is then admitted. A
    stream that sends its batch in time is never cut."""
    import threading

    monkeypatch.setattr(_server, "FIRST_BATCH_TIMEOUT_S", 1.0)
    running = start_collector(max_jobs=3)
    release = threading.Event()

    def hello_only(job):
        yield hello(job=job)
        release.wait(20)

    errors = []

    def idle(job):
        with running.channel() as chan:
            try:
                list(agent_pb2_grpc.AgentServiceStub(chan).Connect(hello_only(job), timeout=20))
            except grpc.RpcError as exc:
                errors.append((exc.code(), exc.details()))

    threads = [threading.Thread(target=idle, args=(f"idle{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(running.collector.state.snapshot()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    with running.channel() as chan:  # every slot held: a real job is refused now
        with pytest.raises(grpc.RpcError) as err:
            list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter([hello(job="real"), batch(1)]), timeout=10))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for t in threads:
        t.join(15)
    release.set()
    assert [c for c, _ in errors] == [grpc.StatusCode.DEADLINE_EXCEEDED] * 3, errors
    assert all("no Batch within" in d for _, d in errors)
    deadline = time.monotonic() + 10  # forgotten at the next housekeeping tick
    while running.collector.state.snapshot() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.collector.state.snapshot() == []

    def slow_but_in_time():
        yield hello(job="real")
        time.sleep(0.5)
        yield batch(1, steps=[step(1)])
        time.sleep(1.5)  # past the first-batch deadline: a stream that sent a batch is never cut
        yield batch(2, steps=[step(2)])

    with running.channel() as chan:
        acks = list(agent_pb2_grpc.AgentServiceStub(chan).Connect(slow_but_in_time(), timeout=20))
    assert [a.ack.seq for a in acks] == [1, 2]
    text = running.get("/metrics")[2].decode()
    assert 'stepwatch_collector_streams_rejected_total{reason="no_batch"} 3.0' in text
