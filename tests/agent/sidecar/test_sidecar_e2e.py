"""End-to-end tests: the real sidecar as a subprocess, streaming to a real gRPC server.

The server below is a minimal stand-in for the collector (hand-registered Connect handler,
real gRPC on loopback, port 0): it records every message per stream and acks every batch.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent import futures

import grpc
import pytest

from stepwatch.core import contract
from stepwatch.proto.stepwatch.v1 import agent_pb2

pytestmark = pytest.mark.timeout(60)


class FakeCollector:
    """Real gRPC server on 127.0.0.1 recording (stream number, AgentMessage) pairs."""

    def __init__(self, port: int = 0, token: str = "") -> None:
        self.messages: list = []
        self.acked: list = []
        self.streams = 0
        self._token = token
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.stream_stream_rpc_method_handler(
            self._connect, request_deserializer=agent_pb2.AgentMessage.FromString,
            response_serializer=agent_pb2.Command.SerializeToString)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("stepwatch.v1.AgentService", {"Connect": handler}),))
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    def _connect(self, requests, context):
        if self._token and dict(context.invocation_metadata()).get("authorization") != "Bearer " + self._token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token for job test")
        with self._lock:
            self.streams += 1
            stream = self.streams
        for msg in requests:
            with self._lock:
                self.messages.append((stream, msg))
            if msg.HasField("batch"):
                with self._lock:
                    self.acked.append(msg.batch.seq)
                yield agent_pb2.Command(ack=agent_pb2.Ack(seq=msg.batch.seq))

    def batches(self) -> list:
        with self._lock:
            return [m.batch for _, m in self.messages if m.HasField("batch")]

    def steps(self) -> list:
        return [s.step for b in self.batches() for s in b.steps]

    def stop(self) -> None:
        self.server.stop(0).wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class SidecarProc:
    def __init__(self, tmp_path, port: int, trainer_pid: int = 0, **overrides) -> None:
        self.session = uuid.uuid4().hex[:12]
        self.spool_root = str(tmp_path / "spool")
        self.spool = os.path.join(self.spool_root, "job_a", f"rank3-{self.session}")
        self.stderr_path = tmp_path / f"sidecar-{self.session}.err"
        settings = {
            "collector": f"127.0.0.1:{port}", "token": "",
            "flush_interval_s": 0.1, "nvml_interval_s": 0.1, "host_interval_s": 0.1,
            "spool_dir": self.spool_root, "spool_max_bytes": 1 << 20, "reconnect_max_s": 0.3,
            "shutdown_timeout_s": 5.0, "log_level": "INFO", **overrides}
        hello = {"job": "job/a", "rank": 3, "local_rank": 1, "world_size": 4, "host": "h1",
                 "pid": os.getpid(), "session_id": self.session, "agent_version": "0.1.0",
                 "config": {"flush_interval_s": "0.1"}, "attach_time_s": time.time()}
        config = contract.config(settings, hello, trainer_pid or os.getpid())
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "stepwatch.agent._sidecar"],
                                         stdin=subprocess.PIPE, stderr=err, start_new_session=True)
        self.send(config)

    def send(self, obj) -> None:
        line = obj if isinstance(obj, str) else json.dumps(obj)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def steps(self, first: int, last: int) -> None:
        for n in range(first, last + 1):
            self.send({"t": "step", "step": n, "end_time_s": time.time(), "duration_s": 0.035,
                       "clock": "host", "dataloader_wait_s": 0.001, "samples": 8})

    def finish(self, timeout: float = 20.0) -> int:
        self.proc.stdin.close()
        return self.proc.wait(timeout)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()


@pytest.fixture
def collector():
    server = FakeCollector()
    yield server
    server.stop()


def test_hello_first_then_every_step_exactly_once(tmp_path, collector):
    side = SidecarProc(tmp_path, collector.port)
    side.steps(1, 50)
    assert wait_for(lambda: len(collector.steps()) >= 20)
    side.steps(51, 100)
    assert side.finish() == 0, side.stderr
    first = collector.messages[0][1]
    assert first.HasField("hello")
    assert (first.hello.job, first.hello.rank, first.hello.session_id) == ("job/a", 3, side.session)
    assert first.hello.config["flush_interval_s"] == "0.1"
    assert sorted(collector.steps()) == list(range(1, 101))
    seqs = [b.seq for b in collector.batches()]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1
    assert not os.path.exists(side.spool), "spool directory is removed after a clean exit"
    assert "stepwatch-sidecar[rank 3]:" in side.stderr


def test_collector_down_at_start_then_up(tmp_path):
    port = free_port()
    side = SidecarProc(tmp_path, port)
    side.steps(1, 30)
    assert wait_for(lambda: os.path.isdir(side.spool) and len([n for n in os.listdir(side.spool) if n.endswith(".pb")]) >= 2)
    server = FakeCollector(port)
    try:
        side.steps(31, 60)
        assert wait_for(lambda: len(server.steps()) == 60), server.steps()
        assert side.finish() == 0, side.stderr
        assert sorted(server.steps()) == list(range(1, 61))
        seqs = [b.seq for b in server.batches()]
        assert len(seqs) == len(set(seqs)), "nothing duplicated"
        assert not os.path.exists(side.spool)
        assert side.stderr.count("UNAVAILABLE") <= 2, "duplicate errors are suppressed"
    finally:
        server.stop()


def test_collector_restart_mid_stream(tmp_path):
    first = FakeCollector()
    side = SidecarProc(tmp_path, first.port)
    side.steps(1, 30)
    assert wait_for(lambda: len(first.steps()) == 30)
    first.stop()
    side.steps(31, 60)
    time.sleep(0.3)
    second = FakeCollector(first.port)
    try:
        side.steps(61, 90)
        assert side.finish() == 0, side.stderr
        assert sorted(set(first.steps() + second.steps())) == list(range(1, 91))
        first_seqs = [b.seq for b in first.batches()]
        second_seqs = [b.seq for b in second.batches()]
        assert len(second_seqs) == len(set(second_seqs))
        resent = set(first_seqs) & set(second_seqs)
        # Only a batch the first server received but whose ack was lost may come again.
        assert len(resent) <= 2, resent
        assert second.messages[0][1].HasField("hello")
        assert not os.path.exists(side.spool)
    finally:
        second.stop()


def test_malformed_lines_are_counted_not_fatal(tmp_path, collector):
    side = SidecarProc(tmp_path, collector.port)
    side.send("this is not json")
    side.send({"t": "step", "step": "seven"})
    side.send({"t": "no_such_type"})
    side.send({"t": "stats", "records_dropped": 5, "hook_errors": 2})
    side.steps(1, 10)
    side.send({"t": "alloc", "time_s": 1.0, "device": 0, "allocated_bytes": 100, "ooms": 0})
    side.send({"t": "event", "time_s": 1.0, "kind": "hook_error", "message": "boom"})
    side.send({"t": "gpu", "index": 0, "uuid": "1234-abcd", "name": "NVIDIA H200",
               "total_memory_bytes": 1 << 30})
    assert side.finish() == 0, side.stderr
    batches = collector.batches()
    assert sorted(collector.steps()) == list(range(1, 11))
    assert batches[-1].stats.records_dropped == 5 + 3
    assert batches[-1].stats.hook_errors == 2
    assert [a.allocated_bytes for b in batches for a in b.allocator] == [100]
    assert "hook_error" in [e.kind for b in batches for e in b.events]
    gpus = [b.gpu for b in batches if b.HasField("gpu")]
    assert [g.uuid for g in gpus] == ["GPU-1234-abcd"]
    assert side.stderr.count("malformed record dropped") == 3


def _nvml_works() -> bool:
    try:
        import pynvml
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


def test_host_samples_and_one_nvml_unavailable_event(tmp_path, collector):
    side = SidecarProc(tmp_path, collector.port)
    side.send({"t": "gpu", "index": 0, "uuid": "GPU-0", "name": "x", "total_memory_bytes": 1})
    assert wait_for(lambda: sum(len(b.host) for b in collector.batches()) >= 3)
    assert side.finish() == 0, side.stderr
    host = [h for b in collector.batches() for h in b.host]
    assert host[0].resident_memory_bytes > 0 and host[0].threads >= 1 and host[0].cpu_seconds > 0
    assert host[0].children == 0, "the sidecar does not count as a child of the trainer"
    kinds = [e.kind for b in collector.batches() for e in b.events]
    if not _nvml_works():
        assert kinds.count("nvml_unavailable") == 1
        assert collector.messages[0][1].hello.driver_version == ""


def test_bye_exits_while_stdin_stays_open(tmp_path, collector):
    side = SidecarProc(tmp_path, collector.port)
    side.steps(1, 5)
    side.send({"t": "bye"})
    assert side.proc.wait(20) == 0, side.stderr
    assert sorted(collector.steps()) == [1, 2, 3, 4, 5]


def test_sigterm_flushes_and_exits_zero(tmp_path, collector):
    side = SidecarProc(tmp_path, collector.port)
    side.steps(1, 5)
    assert wait_for(lambda: len(collector.steps()) == 5)
    side.proc.send_signal(signal.SIGTERM)
    assert side.proc.wait(20) == 0, side.stderr


def test_exits_when_trainer_pid_is_gone(tmp_path, collector):
    trainer = subprocess.Popen([sys.executable, "-c", "pass"])
    trainer.wait()
    side = SidecarProc(tmp_path, collector.port, trainer_pid=trainer.pid)
    assert side.proc.wait(20) == 0, side.stderr
    side.proc.stdin.close()


def test_collector_never_up_leaves_spool_and_exits_zero(tmp_path):
    side = SidecarProc(tmp_path, free_port(), shutdown_timeout_s=0.5)
    side.steps(1, 10)
    time.sleep(0.3)
    started = time.monotonic()
    assert side.finish() == 0, side.stderr
    assert time.monotonic() - started < 5.0
    assert os.listdir(side.spool), "pending batches stay on disk"
    assert side.spool in side.stderr and "unacknowledged" in side.stderr


def test_bad_token_is_reported_clearly(tmp_path):
    server = FakeCollector(token="secret")
    try:
        side = SidecarProc(tmp_path, server.port, token="wrong", shutdown_timeout_s=0.5)
        side.steps(1, 3)
        assert wait_for(lambda: "bad token for job test" in side.stderr)
        assert side.finish() == 0
        assert side.stderr.count("bad token for job test") == 1
        assert "UNAUTHENTICATED" in side.stderr
    finally:
        server.stop()


def test_token_is_sent_as_bearer(tmp_path):
    server = FakeCollector(token="secret")
    try:
        side = SidecarProc(tmp_path, server.port, token="secret")
        side.steps(1, 3)
        assert side.finish() == 0, side.stderr
        assert sorted(server.steps()) == [1, 2, 3]
    finally:
        server.stop()


def test_bad_config_exits_two(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "stepwatch.agent._sidecar"],
                          input=b'{"t":"config","settings":{"flush_interval_s":0},"hello":{"job":"j"}}\n',
                          capture_output=True, timeout=20)
    assert proc.returncode == 2
    assert b"option 'flush_interval_s' from config line: invalid value 0: must be > 0" in proc.stderr


def test_a_damaged_spool_file_is_quarantined_not_resent_forever(tmp_path):
    """A spooled batch damaged on disk while the collector was down: the real collector refuses
    it as malformed; the sidecar moves it aside after the second refusal, counts it, and every
    other step arrives (before: the same batch was resent in a loop and nothing after it came)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from _procs import Collector

    port = free_port()
    side = SidecarProc(tmp_path, port)
    side.steps(1, 30)
    assert wait_for(lambda: os.path.isdir(side.spool) and len([n for n in os.listdir(side.spool)
                                                              if n.endswith(".pb")]) >= 2)
    first = sorted(n for n in os.listdir(side.spool) if n.endswith(".pb"))[0]
    with open(os.path.join(side.spool, first), "r+b") as fh:
        fh.write(b"\xff\xff\xff\xff\xff\xff\xff")  # an invalid varint where the Batch begins
    col = Collector(tmp_path, grpc_port=port).start()
    try:
        side.steps(31, 60)
        assert wait_for(lambda: os.path.exists(os.path.join(side.spool, "quarantine", first)), timeout=20), \
            side.stderr
        assert wait_for(lambda: (col.value("stepwatch_steps_total", training_job="job/a", rank=3) or 0) >= 60,
                        timeout=20)
        assert wait_for(lambda: col.value("stepwatch_agent_spool_batches_dropped_total", training_job="job/a", rank=3) == 1)
        assert side.finish() == 0, side.stderr
        assert "quarantined" in side.stderr
    finally:
        col.kill()


def test_after_the_trainer_exited_what_is_left_is_logged_in_the_spool_not_into_the_next_command(tmp_path):
    """The trainer is gone before the sidecar's shutdown (collector never up): the line saying
    what is left goes to sidecar.log in the kept spool, not to the terminal the next command now
    uses."""
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    side = SidecarProc(tmp_path, free_port(), trainer_pid=trainer.pid, shutdown_timeout_s=0.5)
    side.steps(1, 10)
    trainer.wait()
    assert side.proc.wait(30) == 0, side.stderr
    side.proc.stdin.close()
    assert "unacknowledged" not in side.stderr, side.stderr
    log = open(os.path.join(side.spool, "sidecar.log")).read()
    assert "unacknowledged batch(es) left in " + side.spool in log, log
