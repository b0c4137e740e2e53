"""ControlService.Capture end to end: a real collector, real gRPC clients playing agents, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading

import grpc
import pytest

from collector_testlib import batch, hello
from stepwatch.collector.ingest._control import AgentStream
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

MIB = 1 << 20
ENV = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}


class FakeAgent:
    """One rank's sidecar over a real stream: Hello, batch 1 (waits for its ack), then answers
    every capture_trace Command with a batch carrying a TraceRef (unless ``answer`` is False)."""

    def __init__(self, running, rank: int, *, job: str = "j", answer: bool = True, token: str = ""):
        self.rank, self.answer, self.seq = rank, answer, 1
        self.commands: list = []
        self.ready = threading.Event()
        self._out: "queue.Queue" = queue.Queue()
        for msg in (hello(job=job, rank=rank, host=f"node-{rank}"), batch(1)):
            self._out.put(msg)
        self._chan = running.channel()
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._replies = agent_pb2_grpc.AgentServiceStub(self._chan).Connect(
            iter(self._out.get, None), metadata=metadata, timeout=30)
        self._thread = threading.Thread(target=self._loop, name=f"fake-agent-{rank}", daemon=True)
        self._thread.start()
        assert self.ready.wait(10), "no ack for batch 1"

    def _loop(self) -> None:
        try:
            for cmd in self._replies:
                self.commands.append(cmd)
                if cmd.WhichOneof("payload") == "ack":
                    self.ready.set()
                elif cmd.WhichOneof("payload") == "capture_trace" and self.answer:
                    ct = cmd.capture_trace
                    self.seq += 1
                    self._out.put(batch(self.seq, traces=[agent_pb2.TraceRef(
                        request_id=ct.request_id, path=f"/traces/rank{self.rank}.json.gz", bytes=7 * MIB // 2,
                        first_step=101, last_step=100 + ct.steps)]))
        except grpc.RpcError:
            pass

    def close(self) -> None:
        self._out.put(None)
        self._thread.join(10)
        self._chan.close()


@pytest.fixture
def agents():
    made: list = []

    def make(running, rank, **kw) -> FakeAgent:
        made.append(FakeAgent(running, rank, **kw))
        return made[-1]

    yield make
    for agent in made:
        agent.close()


def capture(running, metadata=None, **fields) -> agent_pb2.CaptureReply:
    with running.channel() as chan:
        return agent_pb2_grpc.ControlServiceStub(chan).Capture(agent_pb2.CaptureRequest(**fields), timeout=15,
                                                               metadata=metadata)


# --- AgentStream: commands go out while no request arrives ----------------------------------

def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 5))


def test_stream_sends_command_while_agent_is_silent():
    async def main():
        stop = asyncio.Event()

        async def silent():
            await stop.wait()
            return
            yield  # noqa: unreachable - makes this an async generator

        stream = AgentStream(hello().hello, silent())
        cmd = agent_pb2.Command(capture_trace=agent_pb2.CaptureTrace(request_id="r", steps=3))
        assert stream.send(cmd)
        assert await stream.next() is cmd
        stop.set()
        assert await stream.next() is None
        stream.close()
        assert not stream.send(cmd)
    run(main())


def test_stream_keeps_order_bounds_read_ahead_and_raises_reader_error():
    async def main():
        produced = []

        async def requests():
            for i in range(6):
                produced.append(i)
                yield i
            raise RuntimeError("boom")

        stream = AgentStream(hello().hello, requests(), max_ahead=2, max_commands=1)
        for _ in range(20):
            await asyncio.sleep(0)  # let the reader run as far as it may
        assert len(produced) <= 3  # two queued + one waiting for credit
        cmd = agent_pb2.Command(ack=agent_pb2.Ack(seq=9))
        assert stream.send(cmd) and not stream.send(cmd)  # outbox of one is full
        got = []
        with pytest.raises(RuntimeError, match="boom"):
            while True:
                got.append(await stream.next())
        assert got[:2] == [0, 1] and got.count(cmd) == 1  # arrival order: queued requests come first
        assert [g for g in got if g is not cmd] == list(range(6))
        stream.close()
    run(main())


# --- Capture over the wire -------------------------------------------------------------------

def test_capture_all_connected_ranks(collector, agents):
    a0 = agents(collector, 0)
    agents(collector, 1)
    agents(collector, 0, job="other")
    reply = capture(collector, job="j", steps=3, timeout_s=10)
    assert [(t.rank, t.host, t.trace.path, t.trace.error) for t in reply.traces] == [
        (0, "node-0", "/traces/rank0.json.gz", ""), (1, "node-1", "/traces/rank1.json.gz", "")]
    assert all(t.trace.request_id == reply.request_id and t.trace.last_step == 103 for t in reply.traces)
    (cmd,) = [c for c in a0.commands if c.WhichOneof("payload") == "capture_trace"]
    assert cmd.capture_trace.request_id == reply.request_id and cmd.capture_trace.steps == 3
    assert collector.collector.health.ingest.snapshot()["batches_received"] == 5  # trace batches applied before the reply
    (req,) = json.loads(collector.get("/api/traces")[2])["requests"]
    assert req["request_id"] == reply.request_id and req["ranks_asked"] == [0, 1] and req["steps"] == 3
    assert [t["path"] for t in req["traces"]] == ["/traces/rank0.json.gz", "/traces/rank1.json.gz"]


def test_capture_timeout_and_not_connected(collector, agents):
    agents(collector, 0)
    agents(collector, 1, answer=False)
    reply = capture(collector, job="j", ranks=[1, 0, 5, 1], steps=1, timeout_s=0.5)
    assert [(t.rank, t.host, t.trace.path, t.trace.error) for t in reply.traces] == [
        (0, "node-0", "/traces/rank0.json.gz", ""), (1, "node-1", "", "timeout"), (5, "", "", "not connected")]


@pytest.mark.parametrize("fields,detail", [
    (dict(job="", steps=5), "CaptureRequest.job must not be empty"),
    (dict(job="j", steps=0), "CaptureRequest.steps must be in 1..1000, got 0"),
    (dict(job="j", steps=1001), "CaptureRequest.steps must be in 1..1000, got 1001"),
    (dict(job="j", steps=5, timeout_s=-1), "CaptureRequest.timeout_s must be in"),
    (dict(job="j", steps=5, ranks=[-2]), "CaptureRequest.ranks must be >= 0, got -2"),
])
def test_capture_validation(collector, fields, detail):
    with pytest.raises(grpc.RpcError) as err:
        capture(collector, **fields)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and detail in err.value.details()


def test_capture_unknown_job_is_not_found(collector):
    with pytest.raises(grpc.RpcError) as err:
        capture(collector, job="nope", steps=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in err.value.details()


def test_capture_needs_the_token(start_collector, agents):
    running = start_collector(auth_token="s3cret")
    agents(running, 0, token="s3cret")
    for metadata in (None, (("authorization", "Bearer wrong"),)):
        with pytest.raises(grpc.RpcError) as err:
            capture(running, metadata=metadata, job="j", steps=2)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    reply = capture(running, metadata=(("authorization", "Bearer s3cret"),), job="j", steps=2, timeout_s=10)
    assert reply.traces[0].trace.path == "/traces/rank0.json.gz"


# --- the CLI as a subprocess ------------------------------------------------------------------

def trace_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "trace", *args],
                          capture_output=True, text=True, timeout=30, env={**ENV, **(env or {})})


def test_cli_trace_all_delivered_and_partial(collector, agents):
    agents(collector, 0)
    agents(collector, 1, answer=False)
    addr = collector.collector.grpc_address
    proc = trace_cli("--job", "j", "--rank", "0", "--steps", "3", env={"STEPWATCH_COLLECTOR": addr})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "rank 0  host node-0  /traces/rank0.json.gz  (3.5 MiB)\n"
    proc = trace_cli("--collector", addr, "--job", "j", "--rank", "0", "1", "--rank", "7", "--timeout", "0.5")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == ["rank 0  host node-0  /traces/rank0.json.gz  (3.5 MiB)",
                                        "rank 1  host node-1  error: timeout", "rank 7  host ?  error: not connected"]


def test_cli_trace_bad_arguments_exit_2(collector):
    proc = trace_cli("--collector", collector.collector.grpc_address, "--job", "j", "--steps", "0")
    assert proc.returncode == 2 and "--steps must be in 1..1000, got 0" in proc.stderr
    assert trace_cli("--job", "j").returncode == 2  # no collector given anywhere


def test_cli_trace_wrong_token_exit_1(start_collector):
    running = start_collector(auth_token="s3cret")
    proc = trace_cli("--collector", running.collector.grpc_address, "--job", "j", env={"STEPWATCH_TOKEN": "nope"})
    assert proc.returncode == 1 and "UNAUTHENTICATED" in proc.stderr


def test_abort_mid_stream_still_ends_the_stream(collector):
    with collector.channel() as chan, pytest.raises(grpc.RpcError) as err:
        list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter([hello(), batch(1), hello()]), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Hello is only allowed as the first AgentMessage" in err.value.details()


def test_undecodable_control_requests_are_invalid_argument(collector):
    with collector.channel() as chan:
        for method in ("Capture", "DownloadTrace"):
            call = chan.unary_unary(f"/stepwatch.v1.ControlService/{method}", request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
            if method == "DownloadTrace":
                call = chan.unary_stream(f"/stepwatch.v1.ControlService/{method}", request_serializer=lambda b: b,
                                         response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as err:
                result = call(b"\xff\xff\xff\xff", timeout=10)
                list(result) if method == "DownloadTrace" else result
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err.value)
            assert err.value.details().startswith("malformed "), err.value.details()


def test_trace_sizes_read_as_a_person_would():
    from stepwatch.collector.tools.trace import _size
    assert [_size(n) for n in (512, 20_800, 3_670_016, 5 << 30)] == ["512 B", "20.3 KiB", "3.5 MiB", "5.0 GiB"]
