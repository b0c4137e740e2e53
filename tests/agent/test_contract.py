"""The trainer <-> sidecar contract: every record kind survives encode -> split -> decode into
the message the sidecar sends, and every name that becomes a path or label is safe."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from stepwatch.core import contract
from stepwatch.agent._options import AgentSettings
from stepwatch.agent._sidecar._config import SidecarConfig
from stepwatch.agent._sidecar._records import _DECODERS, parse_line
from stepwatch.agent._sidecar._spool import spool_path
from stepwatch.agent._sidecar._traces import TraceArchive
from stepwatch.core.settings import load, to_mapping
from stepwatch.proto.stepwatch.v1 import agent_pb2


def through_the_pipe(*records: dict) -> list[bytes]:
    """Encode, cut into awkward chunks, split again: what the sidecar's reader sees."""
    data = b"".join(contract.encode(r) for r in records)
    splitter, lines = contract.LineSplitter(), []
    for i in range(0, len(data), 7):
        lines.extend(splitter.feed(data[i:i + 7]))
    assert splitter.rest() is None
    return lines


def test_every_trainer_kind_has_one_decoder():
    assert set(_DECODERS) | {contract.CONFIG} == set(contract.TRAINER_KINDS)


def test_trainer_records_round_trip_into_their_messages():
    stats = {"allocated_bytes.all.current": 11, "reserved_bytes.all.current": 22,
             "active_bytes.all.current": 12, "inactive_split_bytes.all.current": 3,
             "num_alloc_retries": 4, "num_ooms": 1, "allocated_bytes.all.peak": 13,
             "reserved_bytes.all.peak": 23}
    records = [
        contract.gpu(0, "abc-1", "NVIDIA H200", 141 << 30),
        contract.step(7, 1.7e9, 0.035, "cuda_event", 0.002, samples=8, tokens=4096),
        contract.alloc(1.7e9, 0, 141 << 30, stats),
        contract.event(1.7e9, "hook_error", "boom"),
        contract.stats(3, 1, 2, {"user_profiler": 1}, 0.004),
        contract.window(5, "/tmp/w.json", 9, 11, 1.7e9, "cpu,cuda", 0.05, 0.02, False,
                        graph_breaks=2, recompiles=1),
        contract.trace("req-1", "/tmp/t.json", 20, 24),
        contract.bye(),
    ]
    decoded = [parse_line(line) for line in through_the_pipe(*records)]
    assert [d.t for d in decoded] == [r["t"] for r in records]
    gpu, step, alloc, event, stats_rec, window, trace, bye = decoded
    assert gpu.msg == agent_pb2.GpuIdentity(index=0, uuid="GPU-abc-1", name="NVIDIA H200",
                                            total_memory_bytes=141 << 30)
    assert step.msg == agent_pb2.StepRecord(step=7, end_time_s=1.7e9, duration_s=0.035,
                                            clock=agent_pb2.STEP_CLOCK_CUDA_EVENT,
                                            dataloader_wait_s=0.002, samples=8, tokens=4096)
    assert alloc.msg == agent_pb2.AllocatorSample(
        time_s=1.7e9, device=0, device_total_bytes=141 << 30, allocated_bytes=11,
        reserved_bytes=22, active_bytes=12, inactive_split_bytes=3, alloc_retries=4, ooms=1,
        allocated_peak_bytes=13, reserved_peak_bytes=23)
    assert event.msg == agent_pb2.Event(time_s=1.7e9, kind="hook_error", message="boom")
    assert stats_rec.stats == (3, 1) and stats_rec.msg.windows == 2
    assert dict(stats_rec.msg.window_skips) == {"user_profiler": 1}
    assert window.job.path == "/tmp/w.json" and not window.job.discard
    assert (window.job.summary.window_id, window.job.summary.first_step, window.job.summary.last_step,
            window.job.summary.graph_breaks, window.job.summary.activities) == (5, 9, 11, 2, "cpu,cuda")
    assert trace.job == ("req-1", "/tmp/t.json", 20, 24, "")
    assert bye.msg is None


def test_config_record_round_trips_the_settings():
    settings = load(AgentSettings, {"collector": "h:1", "flush_interval_s": 0.25, "token": "s"},
                    environ={})
    hello = {"job": "j", "rank": 3, "gpu": {"uuid": "MIG-7"}}
    (line,) = through_the_pipe(contract.config(to_mapping(settings), hello, 42))
    config = SidecarConfig.from_record(contract.decode(line))
    assert config.settings == settings and config.trainer_pid == 42
    assert config.hello.rank == 3 and config.hello.gpu.uuid == "MIG-7"  # MIG ids kept as they are


def test_sidecar_to_trainer_records_round_trip():
    records = [contract.window_result(5, 0), contract.capture("req-2", 3)]
    assert [contract.decode(line) for line in through_the_pipe(*records)] == records


def test_uuid_normalising_is_one_rule():
    assert contract.normalize_uuid("abc") == "GPU-abc"
    assert contract.normalize_uuid("GPU-abc") == "GPU-abc"
    assert contract.normalize_uuid("MIG-abc") == "MIG-abc"
    assert contract.normalize_uuid(None) == "" and contract.normalize_uuid(" ") == ""


def test_splitter_cuts_an_overlong_line():
    splitter = contract.LineSplitter(max_line=10)
    assert splitter.feed(b"x" * 25) == [b"x" * 10]  # once, cut
    assert splitter.feed(b"x" * 25) == []  # the rest of that line is dropped
    assert splitter.feed(b"x\nok\n" + b"y" * 30 + b"\nz") == [b"ok", b"y" * 10]
    assert splitter.rest() == b"z"


@pytest.mark.parametrize("name", ["..", ".", "", "/", "../../etc", "a/../../b", "x\x00y", "é" * 300,
                                  "/abs/path", "a" * 5000])
def test_unsafe_names_stay_inside_their_roots(tmp_path, name):
    root = tmp_path / "spool"
    path = spool_path(str(root), name, 0, name)
    assert os.path.dirname(os.path.dirname(path)) == str(root)
    assert all(part not in ("", ".", "..") for part in os.path.relpath(path, root).split(os.sep))
    assert "\x00" not in path and len(os.path.basename(os.path.dirname(path))) <= 128
    archive = TraceArchive(str(tmp_path / "traces"), name, 0, 1 << 20, 5)
    if contract.safe_name(name) is None:
        with pytest.raises(ValueError):
            archive.destination(name)
    else:
        dest = archive.destination(name)
        assert os.path.commonpath([dest, str(tmp_path / "traces")]) == str(tmp_path / "traces")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_name_maps_to_one_safe_component(name):
    safe = contract.safe_name(name)
    if safe is not None:
        assert safe.strip(".") and "/" not in safe and "\x00" not in safe and len(safe) <= 128
        assert os.path.basename(safe) == safe


@pytest.mark.parametrize("job, problem", [("a\x00b", "control"), ("a\nb", "control"),
                                          ("j" * 257, "at most 256")])
def test_bad_job_names_are_refused_by_agent_settings(job, problem):
    assert problem in contract.label_problem(job)
    with pytest.raises(ValueError, match=problem):
        load(AgentSettings, {"job": job}, environ={})
    assert contract.label_problem("") == "must not be empty"
    assert load(AgentSettings, {}, environ={"STEPWATCH_JOB": ""}).job is None  # empty: unset
