"""Unit tests of the sidecar's window and trace handling: records, stats, the analysis queue,
the trace archive and its retention, the back channel."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import time

import pytest

from stepwatch.agent._sidecar._backchannel import BackChannel
from stepwatch.agent._sidecar._batcher import Batcher
from stepwatch.core import contract
from stepwatch.agent._sidecar._config import ConfigError, SidecarConfig
from stepwatch.agent._sidecar._records import RecordError, TraceJob, parse_line
from stepwatch.agent._sidecar._traces import TraceArchive
from stepwatch.core.contract import safe_name
from stepwatch.agent._sidecar._window_jobs import TraceJobs, WindowJobs
from stepwatch.agent._sidecar._worker import Worker
from stepwatch.proto.stepwatch.v1 import agent_pb2

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "data", "traces")


def window_line(path, wid=4, **extra):
    obj = {"t": "window", "window_id": wid, "path": str(path), "first_step": 64,
           "last_step": 66, "start_time_s": 1.7e9, "activities": "cpu,cuda",
           "overhead_s": 0.04, "export_s": 0.025, "discard": False, **extra}
    return json.dumps(obj).encode()


def plain_copy(tmp_path, name="cpu_cuda_2gpu_rank0", dest="window.json"):
    """The trainer exports plain JSON: an un-gzipped copy of a fixture."""
    path = tmp_path / dest
    with gzip.open(os.path.join(TRACES, name + ".json.gz")) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


# -- records and config ----------------------------------------------------------------------

def test_parse_window_trace_and_extended_stats(tmp_path):
    rec = parse_line(window_line("/tmp/w.json"))
    assert rec.t == "window" and rec.job.path == "/tmp/w.json" and not rec.job.discard
    s = rec.job.summary
    assert (s.window_id, s.first_step, s.last_step, s.activities) == (4, 64, 66, "cpu,cuda")
    assert (s.overhead_s, s.export_s) == (0.04, 0.025)
    rec = parse_line(b'{"t":"trace","request_id":"r1","path":"/tmp/t.json","first_step":5,'
                     b'"last_step":9,"error":""}')
    assert rec.job == TraceJob("r1", "/tmp/t.json", 5, 9, "")
    rec = parse_line(b'{"t":"trace","request_id":"r2","error":"profiler busy"}')
    assert rec.job.error == "profiler busy" and rec.job.path == ""
    rec = parse_line(b'{"t":"stats","records_dropped":1,"hook_errors":2,"windows":3,'
                     b'"window_skips":{"budget":4},"overhead_ratio":0.002}')
    assert rec.stats == (1, 2)
    assert (rec.msg.windows, dict(rec.msg.window_skips), rec.msg.overhead_ratio) == (
        3, {"budget": 4}, 0.002)


@pytest.mark.parametrize("line,kind", [
    (b'{"t":"window","window_id":1}', "bad_window"),
    (b'{"t":"window","window_id":-1,"path":"/x"}', "bad_window"),
    (b'{"t":"trace","path":"/x"}', "bad_trace"),
    (b'{"t":"trace","request_id":"r"}', "bad_trace"),
    (b'{"t":"stats","window_skips":{"budget":-1}}', "bad_stats"),
])
def test_malformed_window_records(line, kind):
    with pytest.raises(RecordError) as err:
        parse_line(line)
    assert err.value.kind == kind


def test_config_trace_keys_default_and_validate():
    hello = {"job": "j"}
    cfg = SidecarConfig.from_record(contract.config({}, hello, 1)).settings
    assert (cfg.trace_max_bytes, cfg.trace_max_files, cfg.window_top_k) == (2 << 30, 50, 10)
    cfg = SidecarConfig.from_record(contract.config(
        {"trace_dir": "/x", "trace_max_files": 3, "window_top_k": 5}, hello, 1)).settings
    assert (cfg.trace_dir, cfg.trace_max_files, cfg.window_top_k) == ("/x", 3, 5)
    with pytest.raises(ConfigError, match="trace_max_files"):
        SidecarConfig.from_record(contract.config({"trace_max_files": 0}, hello, 1))


def test_batcher_merges_window_stats_and_carries_windows():
    batcher = Batcher()
    trainer = agent_pb2.AgentStats(windows=7, overhead_ratio=0.003)
    trainer.window_skips.update({"budget": 2, "analysis_backlog": 1})
    batcher.set_trainer_stats(1, 0, stats=trainer)
    batcher.count_window_skip("analysis_backlog")
    batcher.add("window", agent_pb2.WindowSummary(window_id=3))
    batcher.add("trace", agent_pb2.TraceRef(request_id="r"))
    batch = batcher.seal()
    assert [w.window_id for w in batch.windows] == [3] and batch.traces[0].request_id == "r"
    assert (batch.stats.windows, batch.stats.overhead_ratio, batch.stats.records_dropped) == (
        7, 0.003, 1)
    assert dict(batch.stats.window_skips) == {"budget": 2, "analysis_backlog": 2}


# -- back channel ------------------------------------------------------------------------------

def read_messages(fd, count, timeout=5.0):
    data, deadline = b"", time.monotonic() + timeout
    while data.count(b"\n") < count and time.monotonic() < deadline:
        data += os.read(fd, 65536)
    return [json.loads(line) for line in data.splitlines()]


def test_back_channel_writes_lines_and_survives_a_closed_reader():
    r, w = os.pipe()
    channel = BackChannel(w)
    channel.start()
    channel.send({"t": "capture", "request_id": "x", "steps": 3})
    assert read_messages(r, 1) == [{"t": "capture", "request_id": "x", "steps": 3}]
    os.close(r)
    for _ in range(3):
        channel.send({"t": "window_result", "window_id": 1, "gpu_event_count": 0})
    channel.stop(time.monotonic() + 2.0)
    assert channel.sent == 1
    channel.send({"t": "late"})  # ignored, no error


def test_back_channel_never_blocks_the_caller():
    r, w = os.pipe()
    channel = BackChannel(w, capacity=4)
    channel.start()
    began = time.monotonic()
    for i in range(20_000):  # far more than a pipe buffer; nobody reads
        channel.send({"t": "window_result", "window_id": i, "gpu_event_count": 1})
    assert time.monotonic() - began < 2.0 and channel.dropped > 0
    os.close(r)
    channel.stop(time.monotonic() + 1.0)


# -- analysis queue ------------------------------------------------------------------------------

class Pipe:
    def __init__(self):
        self.r, w = os.pipe()
        self.channel = BackChannel(w)
        self.channel.start()

    def messages(self, count):
        return read_messages(self.r, count)


def test_window_is_analysed_reported_and_deleted(tmp_path):
    path = plain_copy(tmp_path)
    size = path.stat().st_size
    batcher, pipe = Batcher(), Pipe()
    jobs = WindowJobs(batcher, pipe.channel, top_k=3)
    jobs.start()
    jobs.submit(parse_line(window_line(path, wid=9)).job)
    assert jobs.stop(time.monotonic() + 30.0)
    assert not path.exists()
    (summary,) = batcher.seal().windows
    assert (summary.window_id, summary.first_step, summary.last_step) == (9, 64, 66)
    assert (summary.activities, summary.overhead_s, summary.export_s) == ("cpu,cuda", 0.04, 0.025)
    assert summary.trace_bytes == size and summary.analysis_s > 0
    assert summary.gpu_event_count > 400 and len(summary.top_kernels) == 3
    assert summary.breakdown.step_time_s > 0 and summary.communication_s > 0
    assert pipe.messages(1) == [{"t": "window_result", "window_id": 9,
                                 "gpu_event_count": summary.gpu_event_count}]


def test_discarded_window_only_deletes_its_file(tmp_path):
    path = tmp_path / "w.json"
    path.write_text("{}")
    batcher = Batcher()
    jobs = WindowJobs(batcher, BackChannel(None))
    jobs.start()
    jobs.submit(parse_line(window_line(path, discard=True)).job)
    assert jobs.stop(time.monotonic() + 5.0) and not path.exists()
    batch = batcher.seal()
    assert not batch.windows and not batch.events


def test_corrupt_trace_is_one_event_and_deleted(tmp_path):
    path = tmp_path / "w.json"
    path.write_bytes(b'{"traceEvents": [')
    missing = tmp_path / "gone.json"
    batcher = Batcher()
    jobs = WindowJobs(batcher, BackChannel(None))
    jobs.start()
    jobs.submit(parse_line(window_line(path, wid=1)).job)
    jobs.submit(parse_line(window_line(missing, wid=2)).job)
    assert jobs.stop(time.monotonic() + 5.0) and not path.exists()
    batch = batcher.seal()
    assert not batch.windows
    assert [e.kind for e in batch.events] == ["window_analysis_failed"] * 2
    assert "window 1: TraceError" in batch.events[0].message
    assert "window 2: FileNotFoundError" in batch.events[1].message


def test_backlog_drops_the_oldest_waiting_window(tmp_path):
    release, started = threading.Event(), threading.Event()
    analysed = []

    def slow_analyse(path, top_k, steps):
        started.set()
        release.wait(10)
        analysed.append(os.path.basename(path))
        return agent_pb2.WindowSummary(gpu_event_count=5)

    batcher = Batcher()
    jobs = WindowJobs(batcher, BackChannel(None), analyse=slow_analyse)
    jobs.start()
    paths = []
    for wid in range(1, 6):
        paths.append(tmp_path / f"w{wid}.json")
        paths[-1].write_text("{}")
        jobs.submit(parse_line(window_line(paths[-1], wid=wid)).job)
        if wid == 1:
            assert started.wait(5)
    # window 1 is being analysed; 2 and 3 were dropped as 4 and 5 arrived
    assert not paths[1].exists() and not paths[2].exists()
    release.set()
    assert jobs.stop(time.monotonic() + 5.0)
    assert analysed == ["w1.json", "w4.json", "w5.json"]
    batch = batcher.seal()
    assert [w.window_id for w in batch.windows] == [1, 4, 5]
    assert dict(batch.stats.window_skips) == {"analysis_backlog": 2}
    assert not any(p.exists() for p in paths)


def test_worker_close_drops_what_it_cannot_finish():
    release = threading.Event()
    dropped = []
    worker = Worker("t", lambda item: release.wait(5), 10, dropped.append)
    worker.start()
    for i in range(3):
        worker.submit(i)
    assert not worker.stop(time.monotonic() + 0.2)
    assert dropped == [1, 2]
    release.set()
    worker.submit(99)
    assert dropped == [1, 2, 99], "closed: new items are dropped at once"


# -- trace archive -----------------------------------------------------------------------------

def test_safe_name():
    assert safe_name("job/a b") == "job_a_b"
    assert safe_name("../../etc/passwd") == ".._.._etc_passwd"
    assert safe_name("..") is None and safe_name("") is None and safe_name(".") is None
    assert len(safe_name("x" * 500)) == 128


def archive(tmp_path, **kw):
    args = dict(max_bytes=1 << 30, max_files=50)
    args.update(kw)
    return TraceArchive(str(tmp_path / "traces"), "job/a", 3, **args)


def test_trace_is_gzipped_into_the_trace_dir(tmp_path):
    src = plain_copy(tmp_path, dest="capture.json")
    raw = src.read_bytes()
    ref = archive(tmp_path).store(TraceJob("req/../1", str(src), 10, 14, ""))
    assert ref.path == str(tmp_path / "traces" / "job_a" / "req_.._1" / "rank3.json.gz")
    assert os.path.isabs(ref.path) and not ref.error
    assert (ref.request_id, ref.first_step, ref.last_step) == ("req/../1", 10, 14)
    assert ref.bytes == os.path.getsize(ref.path) < len(raw)
    assert gzip.decompress(open(ref.path, "rb").read()) == raw
    assert not src.exists()
    assert not [f for f in os.listdir(os.path.dirname(ref.path)) if f.endswith(".tmp")]


def test_gzipped_capture_is_copied_as_is(tmp_path):
    src = tmp_path / "capture.json.gz"
    shutil.copy(os.path.join(TRACES, "cuda_only_rank0.json.gz"), src)
    ref = archive(tmp_path).store(TraceJob("r", str(src), 1, 2, ""))
    assert open(ref.path, "rb").read() == open(os.path.join(TRACES, "cuda_only_rank0.json.gz"), "rb").read()


def test_trace_errors_become_error_refs(tmp_path):
    src = tmp_path / "partial.json"
    src.write_text("{")
    ref = archive(tmp_path).store(TraceJob("r", str(src), 1, 2, "export failed"))
    assert (ref.error, ref.path, ref.bytes) == ("export failed", "", 0) and not src.exists()
    src.write_text("{}")
    ref = archive(tmp_path).store(TraceJob("..", str(src), 1, 2, ""))
    assert "not usable" in ref.error and not ref.path and not src.exists()
    ref = archive(tmp_path).store(TraceJob("r", str(tmp_path / "missing.json"), 1, 2, ""))
    assert "archiving the trace failed" in ref.error and not ref.path


def test_retention_removes_oldest_beyond_files_and_bytes(tmp_path):
    arch = archive(tmp_path, max_files=3)
    refs = []
    for i in range(5):
        src = tmp_path / f"c{i}.json"
        src.write_bytes(b'{"traceEvents": []}' + b" " * 1000)
        refs.append(arch.store(TraceJob(f"r{i}", str(src), i, i, "")))
        os.utime(refs[-1].path, (1000 + i, 1000 + i))  # distinct, increasing mtimes
    arch.enforce_retention()
    assert [os.path.exists(r.path) for r in refs] == [False, False, True, True, True]
    assert not os.path.exists(os.path.dirname(refs[0].path)), "empty request folders go"
    unrelated = tmp_path / "traces" / "job_a" / "r4" / "notes.txt"
    unrelated.write_text("mine")
    arch.max_files, arch.max_bytes = 50, refs[4].bytes + refs[3].bytes
    arch.enforce_retention()
    assert [os.path.exists(r.path) for r in refs] == [False, False, False, True, True]
    arch.max_bytes = 1
    assert arch.enforce_retention(keep=refs[4].path) == [refs[3].path]
    assert os.path.exists(refs[4].path) and unrelated.exists(), "kept: newest and foreign files"


def test_trace_jobs_put_refs_into_the_batch(tmp_path):
    batcher = Batcher()
    jobs = TraceJobs(batcher, archive(tmp_path))
    jobs.start()
    src = tmp_path / "c.json"
    src.write_text('{"traceEvents": []}')
    jobs.submit(TraceJob("r1", str(src), 3, 4, ""))
    jobs.submit(TraceJob("r2", "", 3, 4, "timeout"))
    assert jobs.stop(time.monotonic() + 5.0)
    refs = batcher.seal().traces
    assert [(r.request_id, bool(r.path), r.error) for r in refs] == [
        ("r1", True, ""), ("r2", False, "timeout")]
