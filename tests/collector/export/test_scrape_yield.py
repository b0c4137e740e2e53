"""A scrape gives way to a busy ingest (collector/export/_scrape_pacing.py): the load meter, the pacing
arithmetic, and a real collector whose scrape sleeps while its process is busy."""

from __future__ import annotations

import threading
import time

import pytest

from stepwatch.collector.export import _scrape_pacing as _yield
from stepwatch.collector.export._scrape_pacing import ScrapeYield
from stepwatch.collector.state import LoadMeter


class _Clock:
    def __init__(self):
        self.t, self.cpu = 100.0, 10.0

    def now(self):
        return self.t

    def process(self):
        return self.cpu


def test_load_meter_counts_the_cpu_outside_scrapes_per_window():
    c = _Clock()
    m = LoadMeter(window_s=1.0, clock=c.now, cpu=c.process)
    c.t, c.cpu = 100.5, 10.4
    m.sample()
    assert m.share == 0.0  # half a window: not judged yet
    c.t, c.cpu = 101.0, 10.8
    m.add_render(0.2)  # of the 0.8 s of CPU, 0.2 s was a scrape
    m.sample()
    assert m.share == pytest.approx(0.6)
    c.t, c.cpu = 102.0, 10.9
    m.sample()
    assert m.share == pytest.approx(0.1)


def _pacer(share, timeout_s=None, last_scrape_s=0.0):
    meter = LoadMeter()
    meter.share, meter.last_scrape_s = share, last_scrape_s
    cpu, naps, clock = [0.0], [], [1000.0]

    def sleep(s):
        naps.append(s)
        clock[0] += s

    pacer = ScrapeYield(meter, timeout_s, sleep=sleep, thread_cpu=lambda: cpu[0], clock=lambda: clock[0])
    return meter, pacer, cpu, naps, clock


def _run(pacer, cpu, clock, seconds):
    """Render CPU ``seconds`` in 10 ms stages, the thread running alone (wall = CPU)."""
    for _ in range(round(seconds / 0.01)):
        cpu[0] += 0.01
        clock[0] += 0.01
        pacer.pause()
    pacer.done()


def test_a_scrape_does_not_sleep_while_ingest_is_light():
    _, pacer, cpu, naps, _ = _pacer(_yield.IDLE_SHARE - 0.01)
    for _ in range(5):
        cpu[0] += 0.05
        pacer.pause()
    assert naps == [] and pacer.slept == 0.0


def test_a_scrape_keeps_to_the_share_ingest_leaves():
    meter, pacer, cpu, naps, _ = _pacer(0.75)
    cpu[0] += 0.02
    pacer.pause()
    share = _yield.HEADROOM - 0.75  # 0.2: sleep four times the CPU just used
    assert naps == [pytest.approx(0.02 * (1 - share) / share)]
    assert meter._render == pytest.approx(0.02)  # the render CPU is not counted as ingest
    meter.share = 0.99
    cpu[0] += 0.01
    pacer.pause()
    assert naps[-1] == pytest.approx(0.01 * (1 - _yield.MIN_SHARE) / _yield.MIN_SHARE)  # at least MIN_SHARE


def test_with_no_scrape_before_a_scrape_sleeps_at_most_half_its_span():
    meter, pacer, cpu, naps, clock = _pacer(0.9)
    _run(pacer, cpu, clock, 1.0)
    span = _yield.DEADLINE_SHARE * _yield.DEFAULT_TIMEOUT_S
    assert sum(naps) == pytest.approx(span / 2) and pacer.slept == pytest.approx(span / 2)
    assert meter.last_scrape_s == pytest.approx(1.0)  # what the next scrape expects


def test_a_build_of_another_kind_expects_its_own_cpu_and_leaves_the_scrapes_alone():
    """A whole-fleet /api/jobs build paces itself as a scrape does, from the CPU its own kind
    took last time (``expect_s``); the scrapes' expectation stays theirs."""
    meter = LoadMeter()
    meter.share, meter.last_scrape_s = 0.9, 0.3
    cpu, naps, clock = [0.0], [], [1000.0]

    def sleep(s):
        naps.append(s)
        clock[0] += s

    pacer = ScrapeYield(meter, None, sleep=sleep, thread_cpu=lambda: cpu[0], clock=lambda: clock[0], expect_s=1.0)
    for _ in range(100):
        cpu[0] += 0.01
        clock[0] += 0.01
        pacer.pause()
    assert pacer.done() == pytest.approx(1.0)
    assert meter.last_scrape_s == 0.3  # the scrapes' own, untouched
    span = _yield.DEADLINE_SHARE * _yield.DEFAULT_TIMEOUT_S
    # it expected 1.25 s of CPU (not half the span's cap of a first render): it slept until only
    # its rest fitted at half the core, and gave way at every pause before that
    assert naps and sum(naps) < span and clock[0] - 1000.0 <= span + 1e-6


@pytest.mark.parametrize("timeout_s", [None, 10.0, 4.0, 30.0])
def test_a_scrape_keeps_ingests_share_until_only_its_rest_fits_before_the_deadline(timeout_s):
    """Ingest at 0.9 of the core, 1 s of render CPU (as the last scrape): the render keeps
    ingest's leftover (MIN_SHARE) while the time left holds the rest of it (expected: SPARE x 1 s)
    at MAX_SHARE; from then on it keeps about MAX_SHARE (here, where it runs alone, by short
    sleeps: against a busy loop the GIL gives it that), and ends inside the span."""
    span = _yield.DEADLINE_SHARE * (timeout_s or _yield.DEFAULT_TIMEOUT_S)
    meter, pacer, cpu, naps, clock = _pacer(0.9, timeout_s, last_scrape_s=1.0)
    start = clock[0]
    _run(pacer, cpu, clock, 1.0)
    took = clock[0] - start
    expect = _yield.SPARE * 1.0
    shares = [0.01 / (0.01 + n) for n in naps]
    assert shares[0] == pytest.approx(_yield.MIN_SHARE) and max(shares) <= _yield.MAX_SHARE + 1e-9
    assert took < span
    if timeout_s == 30.0:  # time to spare: all of it at ingest's leftover
        assert len(naps) == 100 and took == pytest.approx(1.0 / _yield.MIN_SHARE)
    else:  # sleeps stop once the time left is what the rest needs at MAX_SHARE
        # (t: wall so far; MIN_SHARE x t used; left span - t = (expect - used) / MAX_SHARE)
        t = (span - expect / _yield.MAX_SHARE) / (1 - _yield.MIN_SHARE / _yield.MAX_SHARE)
        at_min = [x for x in shares if x == pytest.approx(_yield.MIN_SHARE)]
        assert len(at_min) == pytest.approx(_yield.MIN_SHARE * t / 0.01, abs=1)
        assert all(x == pytest.approx(_yield.MAX_SHARE, abs=0.2) for x in shares[len(at_min) + 1:])
        # the rest of the 1 s at about MAX_SHARE
        assert took == pytest.approx(t + (1.0 - _yield.MIN_SHARE * t) / _yield.MAX_SHARE, rel=0.05)


def test_a_render_slower_than_expected_ends_inside_the_scrapers_timeout():
    """0.5 s of render CPU expected, 1.5 s taken: past its expectation the rest is taken as a
    quarter of what it used, sleeps stop in time for that, and it ends inside the scraper's
    timeout (not inside the span: the expectation was wrong)."""
    _, pacer, cpu, naps, clock = _pacer(0.9, None, last_scrape_s=0.4)
    start = clock[0]
    _run(pacer, cpu, clock, 1.5)
    assert 0 < len(naps) < 150  # the last stages did not sleep
    assert clock[0] - start < _yield.DEFAULT_TIMEOUT_S


def test_a_render_that_cannot_finish_in_time_does_not_sleep():
    _, pacer, cpu, naps, clock = _pacer(0.9, 2.0, last_scrape_s=0.7)  # 1.5 s span, 0.875 s expected
    cpu[0] += 0.01
    clock[0] += 0.01
    pacer.pause()
    assert naps == []


@pytest.mark.parametrize("raw, expected", [("10", 10.0), ("2.5", 2.5), (None, None), ("", None), ("ten", None),
                                           ("0", None), ("-3", None), ("nan", None), ("inf", None)])
def test_the_scrape_timeout_header_is_read_or_left_out(raw, expected):
    assert _yield.scrape_timeout(raw) == expected


def _sample(text, name):
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.rsplit(" ", 1)[1])


_BUSY = 0.85  # the meter's reading from which a plain scrape sleeps 9x its render CPU (MIN_SHARE)


def _fill(collector, ranks: int) -> None:
    """``ranks`` ranks with a batch each, through the collector's own pipeline on its loop."""
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    async def fill():
        now = collector.clock()
        for r in range(ranks):
            h = agent_pb2.Hello(job=f"job{r // 64}", rank=r % 64, world_size=64, host=f"node-{r // 8}",
                                session_id=f"s{r}", pid=r + 1)
            key = collector.collector.pipeline.connect(h, now)
            b = agent_pb2.Batch(seq=1, sealed_time_s=now)
            for i in range(20):
                b.steps.add(step=i + 1, end_time_s=now - 1 + i * 0.05, duration_s=0.05, dataloader_wait_s=0.001)
            b.gpu_samples.add(time_s=now, sm_clock_hertz=1.98e9, power_watts=500.0, utilization_ratio=0.9)
            b.host.add(time_s=now, cpu_seconds=10.0, resident_memory_bytes=2 << 30)
            b.allocator.add(time_s=now, reserved_bytes=8 << 30, allocated_bytes=6 << 30)
            collector.collector.pipeline.batch(key, h, b, now)

    collector.loop.call(fill(), timeout=60)


def test_a_real_scrape_gives_way_while_the_process_is_busy(start_collector):
    """The collector's process busy (a thread spinning in Python, as a loaded ingest is): its
    ingest CPU gauge rises, and scrapes rendered on the thread (the setting, and the fallback of
    a failed render process) sleep (stepwatch_collector_scrape_yield_seconds_total grows) yet
    return everything. A scrape that brings a short timeout, as Prometheus sends its own,
    sleeps less than its span, where one without sleeps longer."""
    # As in its own process (process_wide: the collector's thread switch interval, which hands
    # the event loop and the render the GIL in 0.1 ms turns rather than Python's 5 ms).
    collector = start_collector(process_wide=True, metrics_render="thread")
    _fill(collector, 2000)  # (a render of some tens of ms: its sleeps are several times that)
    quiet = collector.get("/metrics")[2].decode()
    assert _sample(quiet, "stepwatch_collector_scrape_yield_seconds_total") == 0.0
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    burner = threading.Thread(target=spin, daemon=True)
    burner.start()
    total = "stepwatch_collector_scrape_yield_seconds_total"
    try:
        # Until a scrape has given way and the meter reads the process busy. Scrapes more than a
        # second apart: back to back, on a loaded machine the renders (which the meter leaves
        # out) take most of the GIL, the spinning thread little, and the meter reads idle.
        deadline = time.monotonic() + 30
        while True:
            busy = collector.get("/metrics")[2].decode()
            if (_sample(busy, total) > 0 and _sample(busy, "stepwatch_collector_ingest_cpu_ratio") > _yield.IDLE_SHARE) \
                    or time.monotonic() > deadline:
                break
            time.sleep(1.1)
        # (a body counts the sleeps of the scrapes before it). The short scrape keeps inside its
        # deadline every time; the plain one sleeps longer while the meter reads the process
        # busy, which other processes on the machine can interrupt (the spinning thread then
        # gets less than the share scrapes yield to): up to five tries for that one.
        longer, busy_tries = [], []
        for _ in range(5):
            plain = collector.get("/metrics")[2].decode()
            short = collector.get("/metrics", {"X-Prometheus-Scrape-Timeout-Seconds": "0.2"})[2].decode()
            after = collector.get("/metrics")[2].decode()
            assert 0.0 <= _sample(after, total) - _sample(short, total) <= _yield.DEADLINE_SHARE * 0.2 + 1e-6
            longer.append(_sample(short, total) - _sample(plain, total))
            # how long a plain scrape sleeps follows the meter: 9x its render CPU at a busy
            # share of 0.85 or more, 1.2x at 0.5 (a fresh-clone run under a burner and a parallel
            # suite read about 0.5 and slept 0.03-0.11 s): judged where the meter read it busy
            if _sample(short, "stepwatch_collector_ingest_cpu_ratio") >= _BUSY:
                busy_tries.append(longer[-1])
            if longer[-1] > _yield.DEADLINE_SHARE * 0.2:
                break
    finally:
        stop.set()
        burner.join(5)
    assert _sample(busy, "stepwatch_collector_ingest_cpu_ratio") > _yield.IDLE_SHARE
    assert _sample(busy, total) > 0
    for body in (busy, short):
        assert "stepwatch_collector_per_rank_series" in body and "stepwatch_collector_loop_lag_seconds_count" in body
        assert 'job="job31",rank="15"' in body  # the last of the 2,000 ranks
    if longer[-1] <= _yield.DEADLINE_SHARE * 0.2 and not busy_tries:
        pytest.skip(f"the machine left the spinning thread too little CPU: the meter never read {_BUSY} "
                    f"in five tries (plain scrapes slept {longer} s)")
    # no header: slept longer (the last try is the first that did; it fails when the meter read
    # the process busy in some try and no plain scrape slept past the short one's deadline)
    assert longer[-1] > _yield.DEADLINE_SHARE * 0.2, (longer, busy_tries)
