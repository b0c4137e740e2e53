"""Unit tests of the sidecar's parts: spool, batcher, records, backoff, samplers, config."""

from __future__ import annotations

import ctypes
import os
import pathlib
import time
import random
import types

import pytest

from stepwatch.agent._sidecar._batcher import Batcher
from stepwatch.core import contract
from stepwatch.agent._sidecar._config import ConfigError, SidecarConfig
from stepwatch.core.contract import normalize_uuid
from stepwatch.agent._sidecar._host import HostSampler, trainer_alive
from stepwatch.agent._sidecar._nvml import NvmlSampler
from stepwatch.agent._sidecar._records import RecordError, parse_line
from stepwatch.core.support import backoff_delay
from stepwatch.agent._sidecar._spool import Spool, spool_path
from stepwatch.proto.stepwatch.v1 import agent_pb2


# -- spool -------------------------------------------------------------------------------

def spooled(seq: int, size: int = 10) -> bytes:
    """A serialized Batch ``seq`` of ``size`` bytes (an event's message pads it)."""
    base = agent_pb2.Batch(seq=seq, events=[agent_pb2.Event(message="m")]).ByteSize() - 1
    data = agent_pb2.Batch(seq=seq, events=[agent_pb2.Event(message="m" * max(0, size - base))]).SerializeToString()
    assert len(data) == size, (len(data), size)
    return data


def test_spool_write_ack_pending_and_cleanup(tmp_path):
    path = spool_path(str(tmp_path), "job/x", 2, "s1")
    assert path == os.path.join(str(tmp_path), "job_x", "rank2-s1")
    spool = Spool(path, max_bytes=1000)
    for seq in (1, 2, 3):
        spool.write(seq, spooled(seq))
    assert sorted(os.listdir(path)) == [f"{s:016d}.pb" for s in (1, 2, 3)] + ["seq"]
    assert spool.pending() == [1, 2, 3] and spool.pending(after=1) == [2, 3]
    spool.ack(2)
    spool.ack(99)
    assert spool.pending() == [1, 3] and spool.bytes == 20 and spool.read(2) is None
    assert spool.read(3) == spooled(3)
    spool.close()
    assert os.path.isdir(path), "pending batches are kept"
    spool.ack(1)
    spool.ack(3)
    assert Spool(path, max_bytes=1000).max_seq == 3, "a sidecar taking the session over numbers on"
    spool.close()
    assert not os.path.exists(path)


def test_spool_size_cap_drops_oldest_and_counts(tmp_path):
    spool = Spool(str(tmp_path / "s"), max_bytes=250)
    for seq in range(1, 6):
        spool.write(seq, b"y" * 100)
    assert spool.pending() == [4, 5]
    assert spool.batches_dropped == 3 and spool.bytes == 200
    assert sorted(os.listdir(tmp_path / "s")) == [f"{s:016d}.pb" for s in (4, 5)] + ["seq"]
    spool.write(6, b"z" * 1000)  # larger than the cap on its own: the newest is kept
    assert spool.pending() == [6] and spool.batches_dropped == 5


def test_damaged_spool_files_are_quarantined_and_counted_never_sent(tmp_path, caplog):
    """An empty file, one that does not decode, one whose seq field is not its name's (a
    flipped bit: 11 -> 75): each is moved to quarantine/ when read, counted, and not sent;
    the good ones around them are."""
    spool = Spool(str(tmp_path), max_bytes=10_000)
    for seq in range(1, 6):
        spool.write(seq, spooled(seq, 20))
    (tmp_path / f"{2:016d}.pb").write_bytes(b"")
    (tmp_path / f"{3:016d}.pb").write_bytes(b"\xff\xff\xff")
    (tmp_path / f"{4:016d}.pb").write_bytes(spooled(75, 20))
    sent = [seq for seq in spool.pending() if spool.read(seq) is not None]
    assert sent == [1, 5]
    assert spool.quarantined == 3 and spool.batches_dropped == 3 and spool.pending() == [1, 5]
    assert sorted(os.listdir(tmp_path / "quarantine")) == [f"{s:016d}.pb" for s in (2, 3, 4)]
    text = caplog.text
    assert "empty file" in text and "does not decode" in text and "its seq field reads 75, its name 4" in text


def test_a_spool_that_kept_batches_in_memory_says_they_are_lost(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    spool = Spool(str(blocker / "spool"), max_bytes=10_000)
    for seq in (1, 2):
        spool.write(seq, spooled(seq))
    spool.close()
    assert "2 unacknowledged batch(es) held in memory" in caplog.text and "are lost" in caplog.text
    assert "left in" not in caplog.text  # the folder holds none


def test_spool_adopts_existing_files_and_removes_temporaries(tmp_path):
    first = Spool(str(tmp_path), max_bytes=1000)
    first.write(7, spooled(7))
    (tmp_path / "0000000000000008.pb.tmp").write_bytes(b"partial")
    again = Spool(str(tmp_path), max_bytes=1000)
    assert again.pending() == [7] and again.max_seq == 7
    assert not (tmp_path / "0000000000000008.pb.tmp").exists()


# -- batcher ------------------------------------------------------------------------------

class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_batcher_seals_sequenced_batches_and_skips_empty_ones():
    clock = FakeClock()
    batcher = Batcher(clock=clock, stats_every_s=10.0)
    first = batcher.seal()
    assert first is not None and first.seq == 1, "the first flush announces the stats"
    clock.now += 1
    assert batcher.seal() is None
    batcher.add("step", agent_pb2.StepRecord(step=1))
    batcher.add("host", agent_pb2.HostSample(threads=3))
    batcher.event("nvml_unavailable", "no library")
    batcher.set_trainer_stats(4, 1)
    batcher.count_dropped(2)
    batch = batcher.seal(spool_dropped=5, spool_bytes=77)
    assert batch.seq == 2 and batch.sealed_time_s == clock.now
    assert [s.step for s in batch.steps] == [1] and len(batch.host) == 1
    assert batch.events[0].kind == "nvml_unavailable"
    assert (batch.stats.records_dropped, batch.stats.hook_errors) == (6, 1)
    assert (batch.stats.spool_batches_dropped, batch.stats.spool_bytes) == (5, 77)
    clock.now += 9.9
    assert batcher.seal() is None
    clock.now += 0.1
    stats_only = batcher.seal()
    assert stats_only.seq == 3 and not stats_only.steps and stats_only.stats.records_dropped == 6
    assert batcher.seal(force=True).seq == 4


def test_batcher_carries_gpu_identity_once():
    batcher = Batcher(clock=FakeClock())
    batcher.seal()
    batcher.set_gpu(agent_pb2.GpuIdentity(index=1, uuid="GPU-a"))
    assert batcher.seal().gpu.uuid == "GPU-a"
    assert batcher.seal() is None


def test_batcher_buffers_are_bounded_drop_oldest():
    batcher = Batcher(capacity=3, clock=FakeClock())
    for n in range(1, 6):
        batcher.add("step", agent_pb2.StepRecord(step=n))
    batch = batcher.seal()
    assert [s.step for s in batch.steps] == [3, 4, 5]
    assert batch.stats.records_dropped == 2


# -- records and config ------------------------------------------------------------------

def test_parse_step_with_optional_fields():
    rec = parse_line(b'{"t":"step","step":3,"end_time_s":1.5,"duration_s":0.03,"clock":"cuda_event",'
                     b'"dataloader_wait_s":0.001,"samples":null,"tokens":4096,"future_key":1}')
    assert rec.t == "step" and rec.msg.step == 3 and rec.msg.clock == agent_pb2.STEP_CLOCK_CUDA_EVENT
    assert not rec.msg.HasField("samples") and rec.msg.tokens == 4096


@pytest.mark.parametrize("line, kind", [
    (b"{not json", "invalid_record"), (b"[1]", "invalid_record"), (b'{"t":"nope"}', "unknown_type"),
    (b'{"t":"step","step":-1}', "bad_step"), (b'{"t":"step","clock":"wall"}', "bad_step"),
    (b'{"t":"alloc","allocated_bytes":"many"}', "bad_alloc"), (b"\xff\xfe", "invalid_record"),
    (b'{"t":"stats","records_dropped":-3}', "bad_stats"),
])
def test_parse_rejects_malformed_lines(line, kind):
    with pytest.raises(RecordError) as info:
        parse_line(line)
    assert info.value.kind == kind


def test_gpu_uuid_is_normalized():
    assert parse_line(b'{"t":"gpu","uuid":"abc-1","index":2}').msg.uuid == "GPU-abc-1"
    assert normalize_uuid("GPU-abc") == "GPU-abc" and normalize_uuid("MIG-x") == "MIG-x"


def test_config_validation_names_the_key():
    hello = {"job": "j", "gpu": {"uuid": "u"}}
    cfg = SidecarConfig.from_record(contract.config({"flush_interval_s": 0.01}, hello, 1))
    assert cfg.settings.flush_interval_s == 0.01 and cfg.hello.gpu.uuid == "GPU-u"
    for bad, key in ((contract.config({"host_interval_s": 0}, hello, 1),
                      "option 'host_interval_s' from config line: invalid value 0: must be > 0"),
                     (contract.config({"spool_max_bytes": "lots"}, hello, 1), "spool_max_bytes"),
                     (contract.config({"colector": "h:1"}, hello, 1), "unknown option.* colector"),
                     (contract.config({}, hello, "x"), "trainer_pid"),
                     (contract.config({}, {"job": ""}, 1), "hello.job")):
        with pytest.raises(ConfigError, match=key):
            SidecarConfig.from_record(bad)


def test_read_lines_splits_chunks(tmp_path):
    r, w = os.pipe()
    os.write(w, b'{"a":1}\n{"b"')
    os.write(w, b':2}\n\ntail')
    os.close(w)
    assert list(contract.read_lines(r, chunk=5)) == [b'{"a":1}', b'{"b":2}', b"", b"tail"]
    os.close(r)


# -- backoff ------------------------------------------------------------------------------

def test_backoff_full_jitter_exponential_capped():
    rng = random.Random(42)
    delays = [backoff_delay(n, base=0.5, cap=30.0, rng=rng) for n in range(12)]
    ceilings = [min(30.0, 0.5 * 2 ** n) for n in range(12)]
    assert all(0.0 <= d <= c for d, c in zip(delays, ceilings))
    again = random.Random(42)
    assert delays == [backoff_delay(n, base=0.5, cap=30.0, rng=again) for n in range(12)]
    assert max(delays[8:]) > 5.0, "late attempts reach the cap range"
    assert backoff_delay(10_000, cap=2.0, rng=random.Random(1)) <= 2.0


# -- samplers -----------------------------------------------------------------------------

def test_nvml_missing_emits_exactly_one_event():
    def load():
        raise ImportError("No module named 'pynvml'")
    batcher = Batcher(clock=FakeClock())
    sampler = NvmlSampler(batcher, interval_s=0.01, load=load)
    sampler.set_gpu("GPU-1")
    sampler.start()
    assert sampler.ready.wait(5)
    sampler.stop(time.monotonic() + 1.0)
    events = batcher.seal().events
    assert [e.kind for e in events] == ["nvml_unavailable"] and "pynvml" in events[0].message
    assert sampler.driver_version == "" and not sampler.available


class FakeNvmlError(Exception):
    pass


def fake_nvml(calls):
    """A pynvml look-alike where power is unsupported and only the old throttle API exists."""
    def unsupported(handle):
        calls.append("power")
        raise FakeNvmlError("Not Supported")
    return types.SimpleNamespace(
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_VOLATILE_ECC=0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: b"550.54",
        nvmlDeviceGetHandleByUUID=lambda uuid: {"GPU-abc": "h0"}[uuid],
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=87, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=5, total=80),
        nvmlDeviceGetPowerUsage=unsupported,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: 123_000,
        nvmlDeviceGetTemperature=lambda h, sensor: 61,
        nvmlDeviceGetClockInfo=lambda h, clock: {1: 1980, 2: 2619}[clock],
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 4,
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: (3, 0)[kind],
    )


def test_nvml_sample_units_and_unsupported_query_disabled_once():
    calls: list = []
    batcher = Batcher(clock=FakeClock())
    sampler = NvmlSampler(batcher, interval_s=1.0, load=lambda: fake_nvml(calls), clock=FakeClock(5.0))
    assert sampler.init() and sampler.driver_version == "550.54"
    assert sampler.sample() is None, "nothing is sampled before the trainer's GPU is known"
    sampler.set_gpu("abc")
    first, second = sampler.sample(), sampler.sample()
    assert calls == ["power"], "a failing query is disabled after its first failure"
    assert first.utilization_ratio == pytest.approx(0.87) and first.memory_utilization_ratio == 0.4
    assert (first.memory_used_bytes, first.memory_total_bytes) == (5, 80)
    assert first.energy_joules == 123.0 and first.temperature_celsius == 61.0
    assert first.sm_clock_hertz == 1980e6 and first.memory_clock_hertz == 2619e6
    assert first.clock_event_reasons == 4
    assert (first.ecc_corrected_errors, first.ecc_uncorrected_errors) == (3, 0)
    assert not first.HasField("power_watts") and second.time_s == 5.0
    events = batcher.seal().events
    assert [e.kind for e in events] == ["nvml_query_unsupported", "nvml_gpm_unsupported"]
    assert "power" in events[0].message and "no GPM API" in events[1].message
    sampler.set_gpu("GPU-missing")
    assert sampler.sample() is None and sampler.sample() is None
    assert [e.kind for e in batcher.seal(force=True).events] == ["nvml_device_not_found"]


def fake_gpm_nvml(supported: bool):
    """fake_nvml plus GPM: pynvml's real GPM structures and metric ids, fake device calls that
    report per-metric values (NVLink "not supported", as on a PCIe card)."""
    import pynvml
    nv = fake_nvml([])
    values = {pynvml.NVML_GPM_METRIC_SM_UTIL: 80.7, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 11.9,
              pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 78.3, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 14.4,
              pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 2.0}
    taken = []

    def metrics_get(get):
        assert get.version == pynvml.NVML_GPM_METRICS_GET_VERSION and get.numMetrics == 14
        got = (ctypes.addressof(get.sample1.contents), ctypes.addressof(get.sample2.contents))
        assert got == (taken[-2], taken[-1]), "the previous and the newest sample"
        for i in range(get.numMetrics):
            m = get.metrics[i]
            m.value, m.nvmlReturn = values.get(m.metricId, 0.0), 0
            if m.metricId in (pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
                              pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC):
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return get

    def sample_get(handle, sample):
        taken.append(ctypes.addressof(sample.contents))
        return sample

    for name in dir(pynvml):
        if name.startswith("NVML_GPM_") or name in ("c_nvmlGpmMetricsGet_t", "NVML_ERROR_NOT_SUPPORTED"):
            setattr(nv, name, getattr(pynvml, name))
    nv.nvmlGpmQueryDeviceSupport = lambda h: types.SimpleNamespace(isSupportedDevice=int(supported))
    nv.nvmlGpmSampleAlloc = lambda: ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())
    nv.nvmlGpmSampleGet = sample_get
    nv.nvmlGpmMetricsGet = metrics_get
    nv.nvmlGpmSampleFree = lambda sample: None
    return nv


def test_gpm_counters_between_consecutive_samples_in_base_units():
    batcher = Batcher(clock=FakeClock())
    sampler = NvmlSampler(batcher, interval_s=1.0, load=lambda: fake_gpm_nvml(True), clock=FakeClock(5.0))
    assert sampler.init()
    sampler.set_gpu("abc")
    first, second, third = sampler.sample(), sampler.sample(), sampler.sample()
    assert not first.HasField("sm_active_ratio"), "one GPM sample gives no counters yet"
    for s in (second, third):
        assert s.sm_active_ratio == pytest.approx(0.807) and s.sm_occupancy_ratio == pytest.approx(0.119)
        assert s.tensor_active_ratio == pytest.approx(0.783) and s.dram_active_ratio == pytest.approx(0.144)
        assert s.pcie_tx_bytes_per_second == 2.0 * (1 << 20) and s.fp64_active_ratio == 0.0
        assert not s.HasField("nvlink_tx_bytes_per_second") and not s.HasField("nvlink_rx_bytes_per_second")
    events = batcher.seal(force=True).events
    gpm = [e for e in events if e.kind == "nvml_gpm_unsupported"]
    assert len(gpm) == 1 and "nvlink_tx_bytes_per_second" in gpm[0].message, events


def test_gpu_without_gpm_says_why_once_and_sends_the_other_counters():
    batcher = Batcher(clock=FakeClock())
    sampler = NvmlSampler(batcher, interval_s=1.0, load=lambda: fake_gpm_nvml(False), clock=FakeClock(5.0))
    assert sampler.init()
    sampler.set_gpu("abc")
    samples = [sampler.sample() for _ in range(3)]
    assert all(not s.HasField("sm_active_ratio") and s.utilization_ratio > 0 for s in samples)
    gpm = [e for e in batcher.seal(force=True).events if e.kind == "nvml_gpm_unsupported"]
    assert len(gpm) == 1 and "does not support GPM" in gpm[0].message


def test_host_sample_of_a_real_process():
    sampler = HostSampler(Batcher(), pid=os.getpid(), interval_s=1.0)
    sample = sampler.sample()
    assert sample.cpu_seconds > 0 and sample.resident_memory_bytes > 1 << 20
    assert sample.threads >= 1 and sample.host_memory_available_bytes > 0
    assert trainer_alive(os.getpid()) and not trainer_alive(2 ** 22 + 12345)


def test_host_sampler_samples_at_once_when_started():
    """A job shorter than the interval still reports its process: the first sample is taken
    when the sampler starts, not an interval later (an end-to-end test of a 2-second job saw no
    host sample once)."""
    batcher = Batcher()
    sampler = HostSampler(batcher, pid=os.getpid(), interval_s=60.0)
    sampler.start()
    try:
        deadline = time.monotonic() + 10.0
        while batcher.held("host") == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert batcher.held("host") == 1
    finally:
        sampler.stop(time.monotonic() + 5.0)


@pytest.mark.parametrize("steps", [0, 1, 3, 200, 5000])
def test_spooled_batch_is_framed_without_parsing(steps):
    """The sender frames the spooled Batch bytes into an AgentMessage; the collector parses
    exactly the batch that was sealed (lengths across the 1-, 2- and 3-byte varint forms)."""
    from stepwatch.agent._sidecar._sender import batch_message

    batch = agent_pb2.Batch(seq=9, steps=[agent_pb2.StepRecord(step=i, duration_s=0.01)
                                          for i in range(steps)])
    data = batch.SerializeToString()
    framed = batch_message(data)
    assert framed == agent_pb2.AgentMessage(batch=batch).SerializeToString()
    assert agent_pb2.AgentMessage.FromString(framed).batch == batch


def test_spool_the_disk_refuses_keeps_batches_in_memory_within_the_bound(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    spool = Spool(str(blocker / "spool"), max_bytes=250)  # cannot be made: memory only
    assert spool.write_errors == 1 and "spool" in spool.last_error
    assert spool.write(1, b"a" * 100) is False and spool.write(2, b"b" * 100) is False
    assert spool.pending() == [1, 2] and spool.read(2) == b"b" * 100
    spool.write(3, b"c" * 100)  # over the bound: the oldest goes, as on disk
    assert spool.pending() == [2, 3] and spool.batches_dropped == 1
    spool.ack(2)
    assert spool.pending() == [3] and spool.read(2) is None and spool.max_seq == 3


def test_the_flusher_follows_the_collectors_pace_within_bounds():
    """Seals every tick at its own interval; with an ask, every ask seconds (the own interval
    when longer, MAX_PACE_S at most); early once a paced batch holds _PACED_MAX_STEPS steps."""
    import os
    import types

    from stepwatch.agent._sidecar import _sidecar as _service

    held = [0]
    sealed = []
    fake = types.SimpleNamespace(flush=lambda: sealed.append(1), adopt_leftovers=lambda: None,
                                 config=types.SimpleNamespace(trainer_pid=os.getpid()),
                                 batcher=types.SimpleNamespace(held=lambda kind: held[0]),
                                 request_stop=lambda reason: None)
    clock = [1000.0]
    real = _service.time.monotonic
    _service.time.monotonic = lambda: clock[0]
    try:
        f = _service._Flusher(fake, 2.0, rng=types.SimpleNamespace(uniform=lambda lo, hi: lo))  # no spread

        def run(ticks):
            sealed.clear()
            for _ in range(ticks):
                clock[0] += 2.0
                f._tick()
            return len(sealed)

        assert run(10) == 10                  # no ask: every tick
        f.pace(7.0)
        assert run(14) == 3                   # 7 s on 2 s ticks: the tick at 8 s, 16 s, 24 s of 28
        f.pace(1.0)
        assert run(10) == 10                  # an ask below the own interval: the own interval
        f.pace(1e9)
        assert run(30) == 2                   # capped at MAX_PACE_S (30 s): 60 s of ticks
        held[0] = _service._PACED_MAX_STEPS
        assert run(3) == 3                    # a full paced batch goes at once
        held[0] = 0
        f.pace(float("nan"))
        assert run(4) == 4                    # nonsense from a collector: the own interval
        f.pace(0.0)
        assert run(4) == 4
    finally:
        _service.time.monotonic = real


def test_flushers_that_start_together_spread_their_batches_over_the_interval():
    """Ranks start together; their first ticks fall over the whole flush interval, and ranks
    paced to five ticks' interval from the same tick seal on each of those ticks about equally
    (before: all of them on the same one, a burst at the collector every interval)."""
    import os
    import random
    import types

    from stepwatch.agent._sidecar import _sidecar as _service

    n = 500
    firsts = [_service._Flusher(None, 5.0, rng=random.Random(i)).first_s for i in range(n)]
    assert all(0 <= x <= 5.0 for x in firsts)
    assert all(40 <= sum(1 for x in firsts if k <= x < k + 1) <= 160 for k in range(5))  # 100 each, evenly

    sealed_at: dict = {}
    clock = [1000.0]
    real = _service.time.monotonic
    _service.time.monotonic = lambda: clock[0]
    try:
        flushers = []
        for i in range(n):
            fake = types.SimpleNamespace(flush=lambda i=i: sealed_at.setdefault(i, []).append(clock[0]),
                                         adopt_leftovers=lambda: None, request_stop=lambda reason: None,
                                         config=types.SimpleNamespace(trainer_pid=os.getpid()),
                                         batcher=types.SimpleNamespace(held=lambda kind: 0))
            flushers.append(_service._Flusher(fake, 2.0, rng=random.Random(1000 + i)))
        for f in flushers:
            f._tick()  # everyone seals at the same tick...
            f.pace(10.0)  # ... and is asked for a batch every 10 s (5 ticks)
        sealed_at.clear()
        for _ in range(15):
            clock[0] += 2.0
            for f in flushers:
                f._tick()
    finally:
        _service.time.monotonic = real
    slots = [0] * 5
    for times in sealed_at.values():
        assert [b - a for a, b in zip(times, times[1:])] in ([10.0, 10.0], [10.0])  # then every 10 s
        slots[round((times[0] - 1002.0) / 2.0) % 5] += 1
    assert sum(slots) == n and min(slots) >= 60, slots  # 100 each: the next 10 s evenly, not one tick


def test_default_spool_and_trace_dirs_are_this_users_and_private(tmp_path):
    """The defaults sit under stepwatch-<uid> in the temp directory; every folder the spool
    makes is mode 0700; a closed session leaves no empty job folder behind."""
    import dataclasses
    import stat
    import tempfile

    from stepwatch.agent._options import AgentSettings

    defaults = {f.name: f.default for f in dataclasses.fields(AgentSettings)}
    base = os.path.join(tempfile.gettempdir(), f"stepwatch-{os.getuid()}")
    assert (defaults["spool_dir"], defaults["trace_dir"]) == (os.path.join(base, "spool"), os.path.join(base, "traces"))
    root = tmp_path / "stepwatch-test" / "spool"
    path = spool_path(str(root), "job", 0, "s1")
    spool = Spool(path, max_bytes=1000)
    for d in (tmp_path / "stepwatch-test", root, root / "job", pathlib.Path(path)):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    spool.write(1, spooled(1))
    spool.ack(1)
    spool.close()
    assert os.listdir(root) == []  # the session's folder and the job's folder are gone
