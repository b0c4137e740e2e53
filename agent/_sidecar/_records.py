"""Decoding of the trainer's stdin records (:mod:`stepwatch.core.contract`) into protobuf
messages.

Fields are set by proto name; unknown keys are ignored (forward compatibility), ``null`` means
absent, a value of the wrong type makes the line malformed (:class:`RecordError`).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional

from google.protobuf.message import Message

from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core import contract
from ._config import gpu_identity

__all__ = ["Record", "RecordError", "TraceJob", "WindowJob", "parse_line"]

_CLOCKS = {
    "host": agent_pb2.STEP_CLOCK_HOST,
    "cuda_event": agent_pb2.STEP_CLOCK_CUDA_EVENT,
}


class RecordError(ValueError):
    """A malformed line. ``kind`` is a short, bounded key used for once-per-kind logging."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


class Record(NamedTuple):
    """A decoded line: ``t`` is the record type, ``msg`` the message (None for "bye"; an
    AgentStats with the trainer's counts for "stats"), ``stats`` the (records_dropped,
    hook_errors) pair for "stats" lines, ``job`` a :class:`WindowJob` or :class:`TraceJob`."""

    t: str
    msg: Optional[Message] = None
    stats: Optional[tuple] = None
    job: Optional[tuple] = None


class WindowJob(NamedTuple):
    """A profiler window the trainer exported to ``path``. ``summary`` carries the fields
    taken from the record (window_id, steps, start time, activities, overhead, export)."""

    path: str
    discard: bool
    summary: agent_pb2.WindowSummary


class TraceJob(NamedTuple):
    """A trace captured on command and exported to ``path`` (empty when ``error`` is set)."""

    request_id: str
    path: str
    first_step: int
    last_step: int
    error: str


def parse_line(line: bytes) -> Record:
    """Decode one stdin line; raises :class:`RecordError` for anything malformed."""
    try:
        obj = contract.decode(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError("invalid_record", str(exc)) from None
    t = obj["t"]
    decoder = _DECODERS.get(t)
    if decoder is None:
        raise RecordError("unknown_type", f"t={t!r:.50}")
    try:
        return decoder(obj)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise RecordError(f"bad_{t}", str(exc)) from None


def fill(msg: Message, obj: Mapping[str, Any], skip: tuple = ()) -> Message:
    """Set each scalar field of ``msg`` present (and not None) in ``obj``; return ``msg``."""
    for name in msg.DESCRIPTOR.fields_by_name:
        if name not in skip and obj.get(name) is not None:
            setattr(msg, name, obj[name])
    return msg


def _clocked(msg: Message, t: str, obj: Mapping[str, Any]) -> Record:
    """A record with a step clock (steps, phase times): its fields and its clock by name."""
    fill(msg, obj, skip=("clock",))
    clock = obj.get("clock")
    if clock is not None:
        if clock not in _CLOCKS:
            raise ValueError(f"unknown clock {clock!r:.30}")
        msg.clock = _CLOCKS[clock]
    return Record(t, msg)


def _stats(obj: Mapping[str, Any]) -> Record:
    dropped, errors = int(obj.get("records_dropped") or 0), int(obj.get("hook_errors") or 0)
    windows = int(obj.get("windows") or 0)
    skips = {str(k): int(v) for k, v in (obj.get("window_skips") or {}).items()}
    if min(dropped, errors, windows, *skips.values(), 0) < 0:
        raise ValueError("negative counts")
    msg = agent_pb2.AgentStats(records_dropped=dropped, hook_errors=errors, windows=windows,
                               overhead_ratio=float(obj.get("overhead_ratio") or 0.0),
                               window_warmup_s=float(obj.get("window_warmup_s") or 0.0),
                               window_aftereffect_ratio=float(obj.get("window_aftereffect_ratio") or 0.0))
    msg.window_skips.update(skips)
    return Record(contract.STATS, msg=msg, stats=(dropped, errors))


_WINDOW_FIELDS = ("window_id", "first_step", "last_step", "start_time_s", "activities",
                  "overhead_s", "export_s", "graph_breaks", "recompiles")


def _window(obj: Mapping[str, Any]) -> Record:
    path = _path(obj, required=True)
    summary = agent_pb2.WindowSummary()
    for name in _WINDOW_FIELDS:
        if obj.get(name) is not None:
            setattr(summary, name, obj[name])
    return Record(contract.WINDOW, job=WindowJob(path, bool(obj.get("discard")), summary))


def _trace(obj: Mapping[str, Any]) -> Record:
    request_id, error = obj.get("request_id"), obj.get("error") or ""
    if not isinstance(request_id, str) or not request_id or not isinstance(error, str):
        raise ValueError("request_id must be a non-empty string and error a string")
    steps = [int(obj.get(key) or 0) for key in ("first_step", "last_step")]
    if min(steps) < 0:
        raise ValueError("negative step")
    return Record(contract.TRACE, job=TraceJob(request_id, _path(obj, required=not error),
                                        steps[0], steps[1], error))


def _path(obj: Mapping[str, Any], required: bool) -> str:
    path = obj.get("path") or ""
    if not isinstance(path, str) or (required and not path):
        raise ValueError("path must be a non-empty string")
    return path


_DECODERS = {
    contract.STEP: lambda obj: _clocked(agent_pb2.StepRecord(), contract.STEP, obj),
    contract.PHASE_TIMES: lambda obj: _clocked(agent_pb2.StepPhaseTimes(), contract.PHASE_TIMES, obj),
    contract.ALLOC: lambda obj: Record(contract.ALLOC, fill(agent_pb2.AllocatorSample(), obj)),
    contract.EVENT: lambda obj: Record(contract.EVENT, fill(agent_pb2.Event(), obj)),
    contract.GPU: lambda obj: Record(contract.GPU, gpu_identity(obj)),
    contract.STATS: _stats,
    contract.WINDOW: _window,
    contract.TRACE: _trace,
    contract.BYE: lambda obj: Record(contract.BYE),
    contract.IDENTITY: lambda obj: Record(contract.IDENTITY, fill(agent_pb2.Hello(), obj)),
}
