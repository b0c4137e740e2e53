"""A scrape gives way to a busy ingest (collector/_yield.py): the load meter, the pacing
arithmetic, and a real collector whose scrape sleeps while its process is busy."""

from __future__ import annotations

import threading
import time

import pytest

from stepwatch.collector import _yield
from stepwatch.collector._yield import LoadMeter, ScrapeYield


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


def _pacer(share):
    meter = LoadMeter()
    meter.share = share
    cpu, naps = [0.0], []
    pacer = ScrapeYield(meter, sleep=naps.append, thread_cpu=lambda: cpu[0])
    return meter, pacer, cpu, naps


def test_a_scrape_does_not_sleep_while_ingest_is_light():
    _, pacer, cpu, naps = _pacer(_yield.IDLE_SHARE - 0.01)
    for _ in range(5):
        cpu[0] += 0.05
        pacer.pause()
    assert naps == [] and pacer.slept == 0.0


def test_a_scrape_keeps_to_the_share_ingest_leaves():
    meter, pacer, cpu, naps = _pacer(0.75)
    cpu[0] += 0.02
    pacer.pause()
    share = _yield.HEADROOM - 0.75  # 0.2: sleep four times the CPU just used
    assert naps == [pytest.approx(0.02 * (1 - share) / share)]
    assert meter._render == pytest.approx(0.02)  # the render CPU is not counted as ingest
    meter.share = 0.99
    cpu[0] += 0.01
    pacer.pause()
    assert naps[-1] == pytest.approx(0.01 * (1 - _yield.MIN_SHARE) / _yield.MIN_SHARE)  # at least MIN_SHARE


def test_a_scrape_sleeps_at_most_the_budget():
    _, pacer, cpu, naps = _pacer(0.9)
    for _ in range(100):
        cpu[0] += 0.1
        pacer.pause()
    assert sum(naps) == pytest.approx(_yield.BUDGET_S) and pacer.slept == pytest.approx(_yield.BUDGET_S)


def _sample(text, name):
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_a_real_scrape_gives_way_while_the_process_is_busy(start_collector):
    """The collector's process busy (a thread spinning in Python, as a loaded ingest is): its
    ingest CPU gauge rises, and scrapes rendered on the thread (the setting, and the fallback of
    a failed render process) sleep (stepwatch_collector_scrape_yield_seconds_total grows) yet
    return everything."""
    collector = start_collector(metrics_render="thread")
    quiet = collector.get("/metrics")[2].decode()
    assert _sample(quiet, "stepwatch_collector_scrape_yield_seconds_total") == 0.0
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    burner = threading.Thread(target=spin, daemon=True)
    burner.start()
    try:
        deadline = time.monotonic() + 20
        while True:
            busy = collector.get("/metrics")[2].decode()
            if _sample(busy, "stepwatch_collector_scrape_yield_seconds_total") > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    finally:
        stop.set()
        burner.join(5)
    assert _sample(busy, "stepwatch_collector_ingest_cpu_ratio") > _yield.IDLE_SHARE
    assert _sample(busy, "stepwatch_collector_scrape_yield_seconds_total") > 0
    assert "stepwatch_collector_per_rank_series" in busy and "stepwatch_collector_loop_lag_seconds_count" in busy
