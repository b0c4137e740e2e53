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
