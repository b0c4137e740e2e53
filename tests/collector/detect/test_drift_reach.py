"""What the drift detector can see: once armed, each rank's smallest sustained shift each
severity raises at the job's own noise (``DriftDetector.reach``), exported per job as
``stepwatch_drift_reach_ratio``. On real recordings: tests/collector/detect/test_real_corpus.py."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest

from stepwatch.collector.alerting import AlertBook, AlertMetrics
from stepwatch.collector.detect import DetectionEngine

T0 = 1_700_000_000.0


def feed(engine: DetectionEngine, seconds: float, step_s, start: int = 1, t0: float = T0):
    """40 ms steps (``step_s(t)`` each, ``t`` the job's seconds) for ``seconds``; returns
    (next step, time)."""
    i, now = start, t0
    while now - T0 < seconds:
        dt = step_s(now - T0)
        now += dt
        engine.step("j", 0, i, now, dt)
        i += 1
    return i, now


def test_no_reach_before_armed_then_the_thresholds_on_a_steady_job():
    engine = DetectionEngine()
    feed(engine, 100, lambda t: 0.04)
    assert engine.reach() == {}  # warming up
    feed(engine, 300, lambda t: 0.04 * (1 + 0.002 * math.sin(t)))
    (reach,) = engine.reach().values()
    # steady: each severity's own threshold (0.8 x 10%, 0.8 x 5%, 0.7 x 3%)
    assert {k: round(v, 9) for k, v in reach.items()} == {"critical": 0.08, "warning": 0.04, "info": 0.021}


def test_a_wandering_job_reads_a_reach_above_the_change_it_then_misses():
    """Step time wandering +-12% over two minutes: the reach says a +10% change is out of
    critical reach, and a +10% step from 300 s is indeed not raised critical within 60 s."""
    wander = lambda t: 0.04 * (1 + 0.12 * math.sin(2 * math.pi * t / 120))  # noqa: E731
    engine = DetectionEngine()
    book = AlertBook(1e9, 60.0)
    registry = CollectorRegistry()
    AlertMetrics(book, registry, reach=engine.reach)
    i, now = feed(engine, 300, wander)
    (reach,) = engine.reach().values()
    assert reach["critical"] > 0.10, reach
    text = generate_latest(registry).decode()
    line = next(ln for ln in text.splitlines() if ln.startswith('stepwatch_drift_reach_ratio{severity="critical"')
                or ln.startswith('stepwatch_drift_reach_ratio{training_job="j",severity="critical"'))
    assert math.isclose(float(line.split()[-1]), reach["critical"]), line
    critical_at = None
    while now - T0 < 360:
        dt = 1.10 * wander(now - T0)
        now += dt
        engine.step("j", 0, i, now, dt)
        i += 1
        for c in engine.conditions():
            if c.severity == "critical" and critical_at is None:
                critical_at = now - T0
    assert critical_at is None, critical_at


def test_the_reach_comes_back_with_the_saved_state():
    """A collector restarted on its state directory reads the same reach for an armed rank as
    before the restart (the spreads are saved; the reach is made from them)."""
    from stepwatch.collector.detect._config import DriftConfig
    from stepwatch.collector.detect import RankDrift

    before = RankDrift(DriftConfig(), "j", 0)
    now, i = T0, 1
    while now - T0 < 400:
        dt = 0.04 * (1 + 0.06 * math.sin(2 * math.pi * (now - T0) / 90))
        now += dt
        before.feed(i, now, dt)
        i += 1
    assert before.reach() is not None and before.reach()["critical"] > 0.08, before.reach()
    after = RankDrift(DriftConfig(), "j", 0)
    assert after.reach() is None
    after.restore(before.state())
    assert after.reach() == before.reach()
