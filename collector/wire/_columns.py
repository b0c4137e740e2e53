"""A batch's records read once, as columns.

The collector's state, the diagnosis evidence and the detectors all want the same few fields
of every step and sample; attribute access on a protobuf message is what that costs (each
reader took them again: three passes of five to eight reads per step). :func:`step_columns`
reads every field of the steps once into plain lists that the readers walk with builtins
(``max``, ``sum``, slicing, ``zip``); :class:`SampleColumns` does the same for the samples, a
field when first asked for.
"""

from __future__ import annotations

import math
import operator
from itertools import chain
from typing import Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ._bounds import STRING_BOUNDS
from ._sanitize import _plan
from ..detect import last_max_index

__all__ = ["SampleColumns", "Samples", "StepColumns", "step_columns", "PhaseColumns", "phase_columns"]


class StepColumns:
    """``step``, ``end_time_s``, ``duration_s``, ``dataloader_wait_s`` (the proto's names): one list
    each, in batch order. ``tokens`` and
    ``samples``: lists with None where the record had none, or None when no record had any;
    ``profiled``: indices of profiled steps; ``phase``: {index: phase enum} of marked steps;
    ``cut``: phases cut to their bound (``_bounds.STRING_BOUNDS``) when read; ``phase_times``:
    the batch's sampled steps' phase times (:class:`PhaseColumns`), or None when it has none."""

    __slots__ = ("step", "end_time_s", "duration_s", "dataloader_wait_s", "tokens", "samples", "profiled", "phase",
                 "_finite", "cut", "phase_times")

    def __init__(self, step: list, end_time_s: list, duration_s: list, dataloader_wait_s: list,
                 tokens: Optional[list] = None, samples: Optional[list] = None,
                 profiled: tuple = (), phase: Optional[dict] = None):
        self.step, self.end_time_s, self.duration_s, self.dataloader_wait_s = step, end_time_s, duration_s, dataloader_wait_s
        self.tokens, self.samples = tokens, samples
        self.profiled, self.phase = profiled, phase or {}
        self._finite: Optional[bool] = None
        self.cut = 0
        self.phase_times: Optional[PhaseColumns] = None

    def __len__(self) -> int:
        return len(self.step)

    def finite(self) -> bool:
        """Every float of every step record is finite (a step record's float fields are these
        three: tests/collector/wire/test_nonfinite.py holds it to that). False may also mean an
        overflowing sum: then the exact check decides. Computed once (the pipeline and the
        state both ask; the columns are not changed after they are read)."""
        if self._finite is None:
            self._finite = math.isfinite(sum(self.end_time_s) + sum(self.duration_s) + sum(self.dataloader_wait_s))
        return self._finite


def _optional(records: list, name: str, values: list) -> Optional[list]:
    """An optional count per step (None where unset), or None when no step carries it.
    ``values`` as read (unset reads 0): presence is asked per step only when some count is
    non-zero. A batch of zeros counts as carrying the field when its first or last step has it
    set (agents set it on every step or on none; the totals are the same either way, only
    whether the series exists could differ)."""
    if all(values):  # set on every step (a zero may be unset; a non-zero is set)
        return values
    if any(values):
        return [v if v or r.HasField(name) else None for v, r in zip(values, records)]
    if records[0].HasField(name) or records[-1].HasField(name):
        return [v if r.HasField(name) else None for v, r in zip(values, records)]
    return None


# Every field of a step record the readers want, each read by map() in C over the records
# taken out of the repeated field once (its iteration makes a wrapper per record every time).
# Not zip(*map(attrgetter(all fields))): a tuple per record is a tracked allocation, and the
# collector's garbage collections are driven by their count (bench/results/
# collector_scale_h100host_gc.md).
_FIELDS = tuple(map(operator.attrgetter, ("step", "end_time_s", "duration_s", "dataloader_wait_s", "tokens",
                                          "samples", "profiled", "phase")))


_PHASE_CHARS = STRING_BOUNDS[("StepRecord", "phase")]


def step_columns(batch: agent_pb2.Batch) -> StepColumns:
    """The batch's steps as columns, its phase times with them: what the pipeline reads once
    for state, detection and the diagnosis."""
    records = list(batch.steps)
    if not records:
        columns = StepColumns([], [], [], [])
        columns.phase_times = phase_columns(batch)
        return columns
    step, end, dur, wait, tokens, samples, profiled, phase = [list(map(get, records)) for get in _FIELDS]
    marked = {i: p for i, p in enumerate(phase) if p} if any(phase) else None
    cut = 0
    if marked and max(map(len, marked.values())) > _PHASE_CHARS:  # (the step's phase: bounded here)
        for i, p in marked.items():
            if len(p) > _PHASE_CHARS:
                records[i].phase = marked[i] = p[:_PHASE_CHARS]
                cut += 1
    columns = StepColumns(step, end, dur, wait,
                          _optional(records, "tokens", tokens), _optional(records, "samples", samples),
                          tuple(i for i, flag in enumerate(profiled) if flag) if any(profiled) else (),
                          marked)
    columns.cut = cut
    columns.phase_times = phase_columns(batch)
    return columns


PHASES = ("data", "forward", "backward", "sync", "optimizer")
_PHASE_FIELDS = tuple(map(operator.attrgetter, ("step", "end_time_s", "points", "clock")
                          + tuple(f"{p}_s" for p in PHASES) + tuple(f"host_{p}_s" for p in PHASES)))


class PhaseColumns:
    """A batch's sampled phase times as columns: ``step``, ``end_time_s``, ``points`` (bitmask of the
    points seen), ``clock`` (StepClock), ``device`` and ``host`` (five lists each, in
    :data:`PHASES` order; the same on the host clock)."""

    __slots__ = ("step", "end_time_s", "points", "clock", "device", "host")

    def __init__(self, step: list, end_time_s: list, points: list, clock: list, device: list, host: list):
        self.step, self.end_time_s, self.points, self.clock = step, end_time_s, points, clock
        self.device, self.host = device, host

    def __len__(self) -> int:
        return len(self.step)


def phase_columns(batch: agent_pb2.Batch) -> Optional[PhaseColumns]:
    """The batch's phase times as columns, or None when it has none."""
    records = list(batch.phase_times)
    if not records:
        return None
    cols = [list(map(get, records)) for get in _PHASE_FIELDS]
    return PhaseColumns(cols[0], cols[1], cols[2], cols[3], cols[4:9], cols[9:14])


_GETTERS: dict = {}


_FLOAT_GETTERS: dict = {}
_FEW_FLOATS = 4  # a sample type with at most this many float fields (host, allocator) is checked by column


def _float_getters(floats: tuple) -> list:
    """A getter per field of ``floats`` (a type's singular float fields), made once."""
    getters = _FLOAT_GETTERS.get(floats)
    if getters is None:
        getters = _FLOAT_GETTERS[floats] = [_GETTERS.setdefault(name, operator.attrgetter(name)) for name in floats]
    return getters


class Samples:
    """One kind of a batch's samples (a repeated field: GPU, host or allocator), read a field at
    a time when a reader first asks for it, each field once however many readers ask (the
    diagnosis evidence, the detectors and the state read overlapping fields; reading the records
    once per reader was most of the per-batch work at the agents' 1 Hz:
    bench/results/ingest_path_2core.md)."""

    __slots__ = ("records", "_read")

    def __init__(self, records) -> None:
        self.records = list(records)  # (iterating the repeated field makes a wrapper per record each time)
        self._read: dict = {}

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, name: str) -> list:
        """The field's values, in batch order (an unset field reads 0)."""
        col = self._read.get(name)
        if col is None:
            get = _GETTERS.get(name)
            if get is None:
                get = _GETTERS[name] = operator.attrgetter(name)
            col = self._read[name] = list(map(get, self.records))
        return col

    def optional(self, name: str) -> list:
        """An optional field's values with None where a sample does not carry it. Presence is
        asked only of the samples that read 0 (a non-zero value is set)."""
        key = "?" + name
        col = self._read.get(key)
        if col is None:
            values = self[name]
            col = self._read[key] = values if all(values) else [
                v if v or r.HasField(name) else None for v, r in zip(values, self.records)]
        return col

    def last(self, name: str, optional: bool = False):
        """The last sample's value of the field (``optional``: None when it does not carry it),
        without reading the column."""
        col = self._read.get("?" + name if optional else name)
        if col is not None:
            return col[-1]
        record = self.records[-1]
        value = getattr(record, name)
        return None if optional and not value and not record.HasField(name) else value

    def finite(self) -> bool:
        """Every float field of every sample finite (the samples are flat: their numbers are
        singular floats and integers). Read as columns, which the readers after take from here,
        when the type has few float fields (host: 2, allocator: 1, all of them read). Else, and
        for two samples or fewer, a getter of all the floats per sample: the GPU sample has 22,
        of which the readers take 6, and reading all 22 as columns cost twice the getter
        (5 samples: 11.3 against 5.2 us, bench/results/ingest_path_2core.md).
        False may also mean an overflowing sum: then the exact check decides."""
        if not self.records:
            return True
        floats, getter, repeated, messages = _plan(self.records[0].DESCRIPTOR)
        if repeated or messages:  # not flat (no sample type is): the exact check decides
            return False
        records = self.records
        if len(records) <= 2 or len(floats) > _FEW_FLOATS:
            return math.isfinite(sum(chain.from_iterable(map(getter, records))))
        read = self._read
        if not read:  # (the check comes first: every float column read in one pass)
            columns = [list(map(get, records)) for get in _float_getters(floats)]
            read.update(zip(floats, columns))
            return math.isfinite(sum(map(sum, columns)))
        return math.isfinite(sum(sum(self[name]) for name in floats))

    def latest(self) -> int:
        """The index of the sample with the greatest time (the last of equal times); -1 when none."""
        return last_max_index(self["time_s"]) if self.records else -1


class SampleColumns:
    """A batch's GPU, host and allocator samples as :class:`Samples` (empty when it has none)."""

    __slots__ = ("gpu", "host", "allocator")
    FIELDS = ("gpu_samples", "host", "allocator")  # the batch's fields they hold

    def __init__(self, batch: agent_pb2.Batch) -> None:
        self.gpu = Samples(batch.gpu_samples)
        self.host = Samples(batch.host)
        self.allocator = Samples(batch.allocator)

    def finite(self) -> bool:
        return self.gpu.finite() and self.host.finite() and self.allocator.finite()
