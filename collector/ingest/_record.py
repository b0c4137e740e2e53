"""The record file: what the collector applied, in the wire schema, one JSON line per event.

Written by :class:`Recorder` (the ``record`` option, a pipeline listener) and read by
:func:`read_record` for ``stepwatch replay``; nothing else reads or writes it. Lines::

    {"v":1,"kind":"connect","time":T,"hello":{Hello as proto JSON}}
    {"v":1,"kind":"batch","time":T,"job":J,"rank":R,"session":S,"batch":{Batch as proto JSON}}
    {"v":1,"kind":"disconnect","time":T,"job":J,"rank":R,"session":S}

``time`` is the collector's clock when it applied the event (Unix seconds): replay's clock.
Proto JSON uses the .proto field names (``google.protobuf.json_format``), so every record kind
a batch can carry (steps, allocator, NVML, host, events, windows, traces, stats) is kept.

The earlier per-record form (``{"kind":"step",...}`` and ``{"kind":"allocator",...}``, see
docs/detection.md "Replay") is still read: each such line becomes a one-record batch of its rank.
"""

from __future__ import annotations

import json
import logging
import math
from typing import IO, Iterable, Iterator, NamedTuple, Optional

from google.protobuf import json_format

from stepwatch.proto.stepwatch.v1 import agent_pb2

__all__ = ["Recorder", "RecordError", "RecordEvent", "read_record", "event_line"]

log = logging.getLogger("stepwatch.collector")

VERSION = 1


class RecordError(ValueError):
    """A bad line in a record file; the message names the line number."""


class RecordEvent(NamedTuple):
    kind: str                    # "connect", "batch" or "disconnect"
    time: float
    hello: agent_pb2.Hello       # job, rank, session_id at least
    batch: Optional[agent_pb2.Batch] = None


def _dict(msg) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def event_line(kind: str, now: float, hello: agent_pb2.Hello,
               batch: Optional[agent_pb2.Batch] = None) -> str:
    """One record line (without newline)."""
    obj: dict = {"v": VERSION, "kind": kind, "time": now}
    if kind == "connect":
        obj["hello"] = _dict(hello)
    else:
        obj.update(job=hello.job, rank=hello.rank, session=hello.session_id)
    if batch is not None:
        obj["batch"] = _dict(batch)
    return json.dumps(obj, separators=(",", ":"))


class Recorder:
    """Pipeline listener appending to ``path`` (created if missing), flushed per event. A write
    failure (disk full, file removed) logs one error and disables recording; ingest goes on.
    ``close`` is idempotent."""

    def __init__(self, path: str):
        self.path = path
        self._fh: Optional[IO[str]] = open(path, "a", encoding="utf-8")

    def on_connect(self, hello: agent_pb2.Hello, now: float) -> None:
        self._write(event_line("connect", now, hello))

    def on_batch(self, hello: agent_pb2.Hello, batch: agent_pb2.Batch, now: float, steps=None, samples=None) -> None:
        self._write(event_line("batch", now, hello, batch))

    def on_disconnect(self, hello: agent_pb2.Hello, now: float) -> None:
        self._write(event_line("disconnect", now, hello))

    def _write(self, line: str) -> None:
        if self._fh is None:
            return
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
        except (OSError, ValueError) as exc:
            log.error("stepwatch collector: recording to %s failed, recording disabled: %s", self.path, exc)
            self.close()

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError as exc:
                log.error("stepwatch collector: closing record file %s failed: %s", self.path, exc)


# -- reading ----------------------------------------------------------------------------------
def read_record(lines: Iterable[str]) -> Iterator[RecordEvent]:
    """The events of a record file in file order; RecordError naming the line for bad input.
    Blank lines are skipped."""
    legacy = _Legacy()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise RecordError(f"line {n}: not valid JSON: {exc}") from None
        try:
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            if "v" in obj:
                yield _event(obj)
            else:
                yield from legacy.events(obj)
        except (ValueError, TypeError, json_format.ParseError) as exc:
            raise RecordError(f"line {n}: {exc}") from None


def _event(obj: dict) -> RecordEvent:
    if obj["v"] != VERSION:
        raise ValueError(f"record version {obj['v']!r} is not supported (this reads {VERSION})")
    kind, now = obj.get("kind"), _num(obj, "time", float)
    if kind == "connect":
        return RecordEvent(kind, now, json_format.ParseDict(obj.get("hello") or {}, agent_pb2.Hello()))
    if kind not in ("batch", "disconnect"):
        raise ValueError(f"unknown kind {kind!r}; expected 'connect', 'batch' or 'disconnect'")
    hello = agent_pb2.Hello(job=str(obj.get("job", "")), rank=_num(obj, "rank", int),
                            session_id=str(obj.get("session", "")))
    batch = json_format.ParseDict(obj.get("batch") or {}, agent_pb2.Batch()) if kind == "batch" else None
    return RecordEvent(kind, now, hello, batch)


_LEGACY = {"step": ("job", "rank", "step", "time", "step_time_s"),
           "allocator": ("job", "rank", "time", "allocated_bytes", "reserved_bytes", "inactive_split_bytes",
                         "alloc_retries", "ooms", "device_total_bytes")}


class _Legacy:
    """The earlier per-record JSONL: each line becomes a one-record batch of its rank, after a
    synthesized connect the first time the rank appears (session "legacy")."""

    def __init__(self) -> None:
        self._seq: dict[tuple, int] = {}

    def events(self, rec: dict) -> Iterator[RecordEvent]:
        kind = rec.get("kind")
        if kind not in _LEGACY:
            raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(map(repr, _LEGACY))}")
        missing = [f for f in _LEGACY[kind] if f not in rec]
        if missing:
            raise ValueError(f"{kind} record lacks field(s) {', '.join(missing)}")
        job, rank, t = str(rec["job"]), _num(rec, "rank", int), _num(rec, "time", float)
        hello = agent_pb2.Hello(job=job, rank=rank, session_id="legacy")
        key = (job, rank)
        if key not in self._seq:
            self._seq[key] = 0
            yield RecordEvent("connect", t, hello)
        self._seq[key] += 1
        batch = agent_pb2.Batch(seq=self._seq[key])
        if kind == "step":
            step = batch.steps.add(step=_num(rec, "step", int), end_time_s=t,
                                   duration_s=_num(rec, "step_time_s", float))
            for field, typ in (("samples", int), ("tokens", int), ("dataloader_wait_s", float)):
                if rec.get(field) is not None:
                    setattr(step, field, _num(rec, field, typ))
        else:
            batch.allocator.add(time_s=t, **{f: _num(rec, f, int) for f in _LEGACY[kind][3:]})
        yield RecordEvent("batch", t, hello, batch)


def _num(rec: dict, field: str, kind: type):
    value = rec.get(field)
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError
        out = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"field {field}: expected {'an integer' if kind is int else 'a number'}, "
                         f"got {value!r}") from None
    if kind is float and not math.isfinite(out):
        raise ValueError(f"field {field}: expected a finite number, got {value!r}")
    return out
