"""Non-finite numbers stop at ingest: a record carrying NaN or infinity in any floating-point
field (nested messages included) is dropped before state, detection or export see it, and
counted (``stepwatch_collector_nonfinite_records_total``). The batch's own stats keep their
counts; a non-finite overhead ratio there is cleared.
"""

from __future__ import annotations

import math
import operator
from itertools import chain

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from stepwatch.proto.stepwatch.v1 import agent_pb2

__all__ = ["drop_nonfinite", "drop_far", "clear_out_of_range", "FAR_S", "MAX_STEP", "MAX_COUNTER"]

FAR_S = 86400.0  # a record's time further than this from the collector's clock is refused
MAX_STEP = 10 ** 12  # a step number beyond this is refused (31 years of 1 ms steps)
MAX_COUNTER = 2 ** 63 - 1  # a sample's counter above this is cleared (the collector keeps int64)
_UINTS = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)
_SAMPLES = ("gpu_samples", "allocator", "host")
_INT_GETTERS: dict = {}


def _uints(desc) -> tuple:
    """(unsigned 64-bit singular fields, a getter of them all) of a sample type."""
    got = _INT_GETTERS.get(desc)
    if got is None:
        names = tuple(f.name for f in desc.fields if f.type in _UINTS and not _repeated(f))
        got = _INT_GETTERS[desc] = (names, operator.attrgetter(*names, *names[:1]) if names else None)
    return got


def clear_out_of_range(batch: agent_pb2.Batch) -> int:
    """Clear, in place, every sample counter (unsigned 64-bit field) above MAX_COUNTER; return how
    many. The field is refused, not the sample: its other values still count. (A GPU counter at
    2^63 overflowed the collector's int64 columns and left the rank's detection off.) The usual
    batch costs one sum per sample kind."""
    cleared = 0
    for name in _SAMPLES:
        records = getattr(batch, name)
        if not records:
            continue
        names, getter = _uints(records[0].DESCRIPTOR)
        if getter is None or max(chain.from_iterable(map(getter, records))) <= MAX_COUNTER:
            continue
        for r in records:
            for field in names:
                if getattr(r, field) > MAX_COUNTER:
                    r.ClearField(field)
                    cleared += 1
    return cleared

_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
_RECORDS = ("steps", "allocator", "gpu_samples", "host", "events", "windows", "traces", "phase_times")


def _repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 6; `label` before (gone in 7)
    return flag if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


_PLANS: dict = {}


def _plan(desc) -> tuple:
    """(singular float fields, a getter of them all, repeated float fields, [(message field,
    repeated)]) of a type."""
    plan = _PLANS.get(desc)
    if plan is None:
        floats, rep_floats, msgs = [], [], []
        for field in desc.fields:
            if field.type in _FLOATS:
                (rep_floats if _repeated(field) else floats).append(field.name)
            elif field.type == FieldDescriptor.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
                msgs.append((field.name, _repeated(field)))
        # the first field twice: a tuple even for one field (the sum only tests finiteness)
        getter = operator.attrgetter(*floats, *floats[:1]) if floats else None
        plan = _PLANS[desc] = (tuple(floats), getter, tuple(rep_floats), tuple(msgs))
    return plan


def _finite(msg: Message) -> bool:
    floats, getter, rep_floats, msgs = _plan(msg.DESCRIPTOR)
    total = sum(getter(msg)) if getter is not None else 0.0  # unset fields read 0.0
    # A NaN or an infinity makes the sum non-finite; so could (in theory) an overflow of
    # finite values, hence the exact check before dropping anything.
    if total - total != 0.0 and not all(math.isfinite(getattr(msg, name)) for name in floats):
        return False
    for name in rep_floats:
        if not all(map(math.isfinite, getattr(msg, name))):
            return False
    for name, repeated in msgs:
        if repeated:
            if not _all_finite(getattr(msg, name)):
                return False
        elif msg.HasField(name) and not _finite(getattr(msg, name)):
            return False
    return True


def _all_finite(records) -> bool:
    """Every message of a repeated field finite. A flat type (only singular floats among its
    numbers: the samples, a window's named times) is summed in one pass over all records."""
    if not records:
        return True
    floats, getter, rep_floats, msgs = _plan(records[0].DESCRIPTOR)
    if rep_floats or msgs:
        return all(map(_finite, records))
    if getter is None:
        return True
    total = sum(chain.from_iterable(map(getter, records)))
    return total - total == 0.0 or all(map(_finite, records))  # (an overflow: the exact check)


# What nearly every batch holds; the shortcut below names the rest of _RECORDS (and stats) itself
# (tests/collector/wire/test_nonfinite.py holds the two to that).
_USUAL = frozenset(("steps", "gpu_samples", "host", "allocator"))


def drop_nonfinite(batch: agent_pb2.Batch, checked: tuple = ()) -> int:
    """Remove, in place, every record of ``batch`` with a non-finite number; return how many.
    ``checked``: record fields the caller already found finite."""
    if _USUAL.issubset(checked) and not (batch.windows or batch.events or batch.traces or batch.phase_times
                                         or batch.HasField("stats")):
        return 0  # the usual batch, its steps and samples checked: nothing else to look at (0.4 us, not 1.5)
    dropped = 0
    stats = None
    for field, records in batch.ListFields():  # the fields present, in one call
        name = field.name
        if name == "stats":
            stats = records
        if name not in _RECORDS or name in checked or _all_finite(records):
            continue
        kept = [r for r in records if _finite(r)]
        if len(kept) != len(records):
            dropped += len(records) - len(kept)
            del records[:]
            records.extend(kept)
    if stats is not None:
        if not math.isfinite(stats.overhead_ratio):
            stats.ClearField("overhead_ratio")
        if not math.isfinite(stats.window_warmup_s):
            stats.ClearField("window_warmup_s")
        if not math.isfinite(stats.window_aftereffect_ratio):
            stats.ClearField("window_aftereffect_ratio")
    return dropped


def drop_far(batch: agent_pb2.Batch, now: float, steps, samples) -> int:
    """Remove, in place, steps and samples whose time is more than FAR_S from ``now`` (the
    collector's clock) and steps numbered beyond MAX_STEP; return how many. Such a record is
    damage or a broken clock, never data: stored, one sample at 1e12 would stay "the latest"
    for good (the gauges frozen, leak detection off), a step at 3e20 would be the rank's
    steps_total. Phase times go by the same rules as steps. ``steps``, ``samples``: the batch's columns (checked by min and max, so the
    usual batch costs a few comparisons)."""
    lo, hi = now - FAR_S, now + FAR_S
    dropped = 0
    if len(steps) and not (lo <= min(steps.end_time_s) and max(steps.end_time_s) <= hi and max(steps.step) <= MAX_STEP):
        kept = [r for r in batch.steps if lo <= r.end_time_s <= hi and r.step <= MAX_STEP]
        dropped += len(batch.steps) - len(kept)
        del batch.steps[:]
        batch.steps.extend(kept)
    if batch.phase_times:
        records = batch.phase_times
        kept = [r for r in records if lo <= r.end_time_s <= hi and r.step <= MAX_STEP]
        if len(kept) != len(records):
            dropped += len(records) - len(kept)
            del records[:]
            records.extend(kept)
    for name, col in zip(samples.FIELDS, (samples.gpu, samples.host, samples.allocator)):
        if len(col) and not (lo <= min(col["time_s"]) and max(col["time_s"]) <= hi):
            records = getattr(batch, name)
            kept = [r for r in records if lo <= r.time_s <= hi]
            dropped += len(records) - len(kept)
            del records[:]
            records.extend(kept)
    return dropped
