"""End-to-end: the real sidecar process with stdout as its back channel (as attach() starts
it), a window trace and a captured trace handed over on stdin, and a capture command sent by
a real gRPC server."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from stepwatch.core import contract
from stepwatch.proto.stepwatch.v1 import agent_pb2
from test_sidecar_e2e import FakeCollector, wait_for

pytestmark = pytest.mark.timeout(90)

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "data", "traces")


class CaptureCollector(FakeCollector):
    """Sends one capture_trace command right after the first Hello, then acks as usual."""

    def _connect(self, requests, context):
        it = iter(requests)
        first = next(it)
        with self._lock:
            self.streams += 1
            self.messages.append((self.streams, first))
        yield agent_pb2.Command(capture_trace=agent_pb2.CaptureTrace(request_id="req-1", steps=4))
        for msg in it:
            with self._lock:
                self.messages.append((self.streams, msg))
            if msg.HasField("batch"):
                yield agent_pb2.Command(ack=agent_pb2.Ack(seq=msg.batch.seq))


class PipedSidecar:
    """The sidecar as attach() runs it: stdin and stdout are pipes."""

    def __init__(self, tmp_path, port):
        self.trace_dir = tmp_path / "traces"
        self.stderr_path = tmp_path / "sidecar.err"
        config = contract.config(
            {"collector": f"127.0.0.1:{port}", "flush_interval_s": 0.1, "nvml_interval_s": 5,
             "host_interval_s": 5, "spool_dir": str(tmp_path / "spool"), "reconnect_max_s": 0.3,
             "log_level": "INFO", "trace_dir": str(self.trace_dir), "trace_max_files": 5,
             "window_top_k": 4},
            {"job": "job/w", "rank": 1, "session_id": uuid.uuid4().hex[:8]}, os.getpid())
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "stepwatch.agent._sidecar"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._out = b""
        self.send(config)

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.proc.stdin.flush()

    def read_stdout(self) -> bytes:
        try:
            chunk = os.read(self.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            chunk = b""
        self._out += chunk
        return self._out

    def messages(self):
        return [json.loads(line) for line in self.read_stdout().splitlines()]

    def finish(self):
        self.proc.stdin.close()
        code = self.proc.wait(20)
        self.read_stdout()
        return code


@pytest.fixture
def capture_collector():
    server = CaptureCollector()
    yield server
    server.stop()


def plain_copy(name, dest):
    with gzip.open(os.path.join(TRACES, name + ".json.gz")) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return dest


def test_windows_traces_and_capture_through_a_real_sidecar(tmp_path, capture_collector):
    side = PipedSidecar(tmp_path, capture_collector.port)
    warmup = tmp_path / "window-1.json"
    warmup.write_text("{}")
    window = plain_copy("cpu_cuda_2gpu_rank1", tmp_path / "window-2.json")
    capture = plain_copy("cuda_only_rank0", tmp_path / "capture.json")
    side.send({"t": "window", "window_id": 1, "path": str(warmup), "first_step": 32,
               "last_step": 34, "discard": True})
    side.send({"t": "window", "window_id": 2, "path": str(window), "first_step": 64,
               "last_step": 66, "start_time_s": time.time(), "activities": "cpu,cuda",
               "overhead_s": 0.05, "export_s": 0.03})
    side.send({"t": "trace", "request_id": "req-1", "path": str(capture), "first_step": 70,
               "last_step": 73, "error": ""})
    side.send({"t": "stats", "records_dropped": 0, "hook_errors": 0, "windows": 2,
               "window_skips": {"budget": 1}, "overhead_ratio": 0.001})

    def batches():
        return capture_collector.batches()

    assert wait_for(lambda: any(b.windows for b in batches()) and any(b.traces for b in batches()))
    assert wait_for(lambda: {"t": "capture", "request_id": "req-1", "steps": 4} in side.messages())
    assert wait_for(lambda: any(m["t"] == "window_result" for m in side.messages()))
    assert side.finish() == 0
    (summary,) = [w for b in batches() for w in b.windows]
    assert (summary.window_id, summary.first_step, summary.last_step) == (2, 64, 66)
    assert summary.gpu_event_count > 400 and len(summary.top_kernels) == 4
    assert summary.trace_bytes > 1e6 and summary.analysis_s > 0
    (ref,) = [t for b in batches() for t in b.traces]
    assert ref.path == str(tmp_path / "traces" / "job_w" / "req-1" / "rank1.json.gz")
    assert os.path.getsize(ref.path) == ref.bytes and not ref.error
    assert not warmup.exists() and not window.exists() and not capture.exists()
    results = [m for m in side.messages() if m["t"] == "window_result"]
    assert results == [{"t": "window_result", "window_id": 2,
                        "gpu_event_count": summary.gpu_event_count}]
    stats = batches()[-1].stats
    assert (stats.windows, dict(stats.window_skips), stats.overhead_ratio) == (
        2, {"budget": 1}, 0.001)
    out = side.read_stdout()
    assert all(json.loads(line)["t"] in ("capture", "window_result") for line in out.splitlines()), \
        "nothing but back-channel messages on stdout"


def test_sidecar_survives_a_closed_stdout(tmp_path):
    server = CaptureCollector()
    try:
        side = PipedSidecar(tmp_path, server.port)
        side.proc.stdout.close()  # the trainer stopped reading
        window = plain_copy("cuda_only_rank0", tmp_path / "window-2.json")
        side.send({"t": "window", "window_id": 2, "path": str(window), "first_step": 1,
                   "last_step": 3})
        assert wait_for(lambda: any(b.windows for b in server.batches()))
        side.proc.stdin.close()
        assert side.proc.wait(20) == 0
        assert "Traceback" not in side.stderr_path.read_text()
    finally:
        server.stop()
