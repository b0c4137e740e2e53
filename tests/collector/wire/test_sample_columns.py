"""A batch's samples read as columns (collector/wire/_columns.py: Samples, SampleColumns) give what
reading every record directly gives: values, presence of optional counters (None where unset,
0 where set to 0), the last sample's values, the latest sample, and the detectors' points."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stepwatch.collector.wire._columns import SampleColumns
from stepwatch.collector.state._state import _latest
from stepwatch.collector.detect._memory_rule import GPU_FIELDS as _GPU_POINT
from stepwatch.proto.stepwatch.v1 import agent_pb2

# an optional counter: unset, set to 0, or set to a value
_COUNT = st.one_of(st.none(), st.just(0), st.integers(1, 1 << 40))
_GPU = st.builds(lambda t, used, reasons, temp: (t, used, reasons, temp),
                 st.sampled_from([1.0, 2.0, 3.0]), _COUNT, _COUNT,
                 st.one_of(st.none(), st.just(0.0), st.floats(1, 100)))


def _gpu_batch(rows) -> agent_pb2.Batch:
    b = agent_pb2.Batch(seq=1)
    for t, used, reasons, temp in rows:
        g = b.gpu_samples.add(time_s=t)
        if used is not None:
            g.memory_used_bytes = used
        if reasons is not None:
            g.clock_event_reasons = reasons
        if temp is not None:
            g.temperature_celsius = temp
    return agent_pb2.Batch.FromString(b.SerializeToString())  # parsed, as ingest has it


@settings(max_examples=200, deadline=None)
@given(st.lists(_GPU, max_size=8))
def test_columns_read_as_every_record_does(rows):
    batch = _gpu_batch(rows)
    cols = SampleColumns(batch).gpu
    assert len(cols) == len(rows)
    for name in _GPU_POINT + ("time_s",):
        direct = [getattr(g, name) if g.HasField(name) else None for g in batch.gpu_samples] \
            if name != "time_s" else [g.time_s for g in batch.gpu_samples]
        assert (cols.optional(name) if name != "time_s" else cols["time_s"]) == direct, name
        # asked again: the same answer, read once
        assert cols.optional(name) is cols.optional(name)
    # the latest: greatest time, the last of equal times (as the state kept it sample by sample)
    best = -1
    for i, g in enumerate(batch.gpu_samples):
        if best < 0 or g.time_s >= batch.gpu_samples[best].time_s:
            best = i
    assert cols.latest() == best


def test_set_zero_and_unset_stay_apart():
    batch = _gpu_batch([(1.0, None, 0, None), (2.0, 0, None, 0.0), (3.0, 5, 4, 40.0)])
    cols = SampleColumns(batch).gpu
    assert cols.optional("memory_used_bytes") == [None, 0, 5]
    assert cols.optional("clock_event_reasons") == [0, None, 4]
    assert cols.optional("temperature_celsius") == [None, 0.0, 40.0]
    assert cols["memory_used_bytes"] == [0, 0, 5]  # as read: unset reads 0


def test_latest_keeps_the_held_sample_unless_a_newer_or_equal_one_comes():
    held = agent_pb2.HostSample(time_s=5.0, resident_memory_bytes=1)
    older = agent_pb2.Batch(host=[agent_pb2.HostSample(time_s=4.0, resident_memory_bytes=2)])
    assert _latest(held, SampleColumns(older).host) is held
    equal = agent_pb2.Batch(host=[agent_pb2.HostSample(time_s=5.0, resident_memory_bytes=3),
                                  agent_pb2.HostSample(time_s=3.0, resident_memory_bytes=4)])
    got = _latest(held, SampleColumns(equal).host)
    assert got.resident_memory_bytes == 3 and got is not equal.host[0]  # copied out of the batch
    assert _latest(held, SampleColumns(agent_pb2.Batch()).host) is held
    assert _latest(None, SampleColumns(agent_pb2.Batch()).host) is None


def test_the_finiteness_check_covers_every_float_of_every_sample_type():
    """The pipeline skips the generic non-finite check of the samples when their columns sum
    finite: each float field of each kind, NaN or infinite in one sample of one, two (a getter
    per sample) or five (a column per field for host and allocator, still a getter per sample for
    the GPU's 22 float fields), must make the check fail."""
    from stepwatch.collector.wire._sanitize import _plan

    for field, kind in (("gpu_samples", "gpu"), ("host", "host"), ("allocator", "allocator")):
        desc = getattr(agent_pb2.Batch(), field).add().DESCRIPTOR
        floats, _, repeated, messages = _plan(desc)
        assert floats and not repeated and not messages, field  # flat, as the check assumes
        for n in (1, 2, 5):
            for name in floats:
                for bad in (float("nan"), float("inf"), -float("inf")):
                    batch = agent_pb2.Batch()
                    for i in range(n):
                        getattr(batch, field).add(time_s=1.7e9 + i)
                    assert getattr(SampleColumns(batch), kind).finite()
                    setattr(getattr(batch, field)[n // 2], name, bad)
                    assert not getattr(SampleColumns(batch), kind).finite(), (field, name, n)
                    assert not SampleColumns(batch).finite()


_KINDS = (("gpu_samples", "gpu", agent_pb2.GpuSample), ("host", "host", agent_pb2.HostSample),
          ("allocator", "allocator", agent_pb2.AllocatorSample))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_every_field_of_every_kind_reads_as_the_records_do(data):
    """Any field of any kind, set or not, 0 or not: ``[name]`` is what the record reads,
    ``optional(name)`` is None exactly where the record does not carry it."""
    from google.protobuf.descriptor import FieldDescriptor

    field, kind, message = data.draw(st.sampled_from(_KINDS))
    batch = agent_pb2.Batch(seq=1)
    for _ in range(data.draw(st.integers(0, 6))):
        sample = getattr(batch, field).add()
        for f in message.DESCRIPTOR.fields:
            if data.draw(st.booleans()):
                continue
            if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
                value = data.draw(st.sampled_from([0.0, 1.5, 1.7e9]))
            else:
                value = data.draw(st.sampled_from([0, 1, 7]))
            setattr(sample, f.name, value)
    batch = agent_pb2.Batch.FromString(batch.SerializeToString())
    cols, fresh = getattr(SampleColumns(batch), kind), getattr(SampleColumns(batch), kind)
    records = list(getattr(batch, field))
    for f in message.DESCRIPTOR.fields:
        if records:  # the last sample's value, without the column (fresh) and from it (cols)
            last = records[-1]
            assert fresh.last(f.name) == getattr(last, f.name), f.name
            if f.has_presence:
                assert fresh.last(f.name, optional=True) == (getattr(last, f.name) if last.HasField(f.name) else None)
        assert cols[f.name] == [getattr(r, f.name) for r in records], f.name
        if f.has_presence:
            assert cols.optional(f.name) == [getattr(r, f.name) if r.HasField(f.name) else None
                                             for r in records], f.name
        if records:
            assert cols.last(f.name) == cols[f.name][-1]
            if f.has_presence:
                assert cols.last(f.name, optional=True) == cols.optional(f.name)[-1]
