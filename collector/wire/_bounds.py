"""Every string an agent sends is cut to a bound where it enters the collector (the gRPC
server, before state, detection, recording or export see it), and what was cut is counted
(``stepwatch_collector_trimmed{what="string"}``). One table, ``STRING_BOUNDS``, names the bound
of every string field (and every string map's keys and values) reachable from
``AgentMessage``; tests/collector/wire/test_string_bounds.py walks the proto and fails on a field
the table does not name, so a new field cannot slip through unbounded.

A Hello's ``job`` is checked, not cut (``label_problem``: a refusal); everything else is cut.
A step's ``phase`` is cut where the steps are read into columns (``_columns.step_columns``,
the first thing the pipeline does with a batch), which reads every step's phase anyway: read
twice it cost 0.2 us per step. Cost here: one pass over the fields that can hold strings,
planned once per message type, about 3 us per batch (bench/results/ingest_path_2core.md).
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

__all__ = ["STRING_BOUNDS", "MAP_ENTRIES", "MAX_WINDOW_NAMES", "bound_strings", "bound_window_names"]

_NAME = 256  # a name that may become a label value or a table cell
MAX_WINDOW_NAMES = 50  # top kernels / ops kept per WindowSummary (the agent sends 10)
_TEXT = 1024  # a sentence: an error, an event's message

STRING_BOUNDS: dict[tuple[str, str], int] = {
    ("Hello", "job"): 256,  # refused beyond (label_problem), never cut
    ("Hello", "host"): _NAME, ("Hello", "session_id"): _NAME, ("Hello", "torch_version"): _NAME,
    ("Hello", "cuda_version"): _NAME, ("Hello", "driver_version"): _NAME,
    ("Hello", "agent_version"): _NAME, ("Hello", "config"): _NAME,
    ("GpuIdentity", "uuid"): _NAME, ("GpuIdentity", "name"): _NAME,
    ("StepRecord", "phase"): 32,
    ("Event", "kind"): 64, ("Event", "message"): _TEXT,
    ("AgentStats", "window_skips"): 64,
    ("NamedTime", "name"): _NAME,
    ("WindowSummary", "activities"): 64,
    ("TraceRef", "request_id"): 128, ("TraceRef", "path"): _TEXT, ("TraceRef", "error"): _TEXT,
    ("TraceRef", "trace_id"): _NAME, ("TraceRef", "upload_error"): _TEXT,
}
# Entries kept of a string map (the first ones in key order).
MAP_ENTRIES: dict[tuple[str, str], int] = {("Hello", "config"): 64, ("AgentStats", "window_skips"): 64}
_SKIP = {("Hello", "job")}
_IN_COLUMNS = {"StepRecord"}  # bounded in _columns.step_columns

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def _repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 6; `label` before (gone in 7)
    return flag if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == _MESSAGE and field.message_type.GetOptions().map_entry


_PLANS: dict = {}


def _plan(desc) -> tuple:
    """(strings [(name, bound, repeated)], maps [(name, bound, entries, value is string)],
    messages [(name, repeated)]) of a type: only fields that hold strings somewhere below."""
    plan = _PLANS.get(desc)
    if plan is not None:
        return plan
    _PLANS[desc] = ((), (), ())  # (a recursive type sees itself as string-free while planned)
    strings, maps, msgs = [], [], []
    for f in desc.fields:
        key = (desc.name, f.name)
        if _is_map(f):
            k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            if k.type == _STRING or v.type == _STRING:
                maps.append((f.name, STRING_BOUNDS[key], MAP_ENTRIES.get(key, 1 << 30), v.type == _STRING))
        elif f.type == _STRING and key not in _SKIP:
            strings.append((f.name, STRING_BOUNDS[key], _repeated(f)))
        elif f.type == _MESSAGE and f.message_type.name not in _IN_COLUMNS and any(_plan(f.message_type)):
            msgs.append((f.name, _repeated(f)))
    plan = _PLANS[desc] = (tuple(strings), tuple(maps), tuple(msgs))
    return plan


def bound_strings(msg: Message) -> int:
    """Cut every string field of ``msg`` (nested messages included) to its bound in place;
    returns how many strings (or map entries) were cut or dropped."""
    strings, maps, msgs = _plan(msg.DESCRIPTOR)
    cut = 0
    for name, bound, repeated in strings:
        if repeated:
            values = getattr(msg, name)
            if any(len(v) > bound for v in values):
                fixed = [v[:bound] for v in values]
                cut += sum(1 for v in values if len(v) > bound)
                del values[:]
                values.extend(fixed)
        else:
            value = getattr(msg, name)
            if len(value) > bound:
                setattr(msg, name, value[:bound])
                cut += 1
    for name, bound, entries, string_values in maps:
        field = getattr(msg, name)
        if len(field) > entries or any(len(k) > bound or (string_values and len(v) > bound)
                                       for k, v in field.items()):
            items = sorted(field.items())
            kept = {k[:bound]: (v[:bound] if string_values else v) for k, v in items[:entries]}
            cut += max(0, len(items) - entries) + sum(
                1 for k, v in items[:entries] if len(k) > bound or (string_values and len(v) > bound))
            msg.ClearField(name)
            field = getattr(msg, name)
            field.update(kept)
    for name, repeated in msgs:
        if repeated:
            for m in getattr(msg, name):
                cut += bound_strings(m)
        elif msg.HasField(name):
            cut += bound_strings(getattr(msg, name))
    return cut


def bound_window_names(msg: Message) -> int:
    """Keep at most MAX_WINDOW_NAMES kernels and operators (the largest) in each of the batch
    ``msg``'s windows and cut their names to their string bound; returns how many lists and
    names were cut (``stepwatch_collector_trimmed{what="window_names"}``)."""
    cut = 0
    for w in msg.windows or ():
        for field in (w.top_kernels, w.top_ops):
            if len(field) > MAX_WINDOW_NAMES:
                keep = sorted(field, key=lambda n: -n.seconds if n.seconds == n.seconds else 0.0)[:MAX_WINDOW_NAMES]
                keep = [type(n)(name=n.name, seconds=n.seconds, count=n.count) for n in keep]
                del field[:]
                field.extend(keep)
                cut += 1
            for n in field:
                if len(n.name) > _NAME:
                    n.name = n.name[:_NAME]
                    cut += 1
    return cut
