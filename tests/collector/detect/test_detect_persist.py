"""Drift state survives a collector restart (collector/detect/_persist.py): the settled level,
the noise spreads and an open episode, in SQLite under ``state_dir``."""

from __future__ import annotations

import math
import random
import sqlite3

from stepwatch.collector.detect import DetectionEngine, Steps, parse_detection
from stepwatch.collector.detect._persist import DriftStore

CFG = parse_detection({"warmup_steps": 10})
T0 = 1.7e9


def _feed(engine, rng, start_step, start_time, seconds, level):
    """40 ms steps from ``start_time`` for ``seconds`` at ``level(t)``; saves once a minute as
    the collector's housekeeping does. Returns (next step, time, conditions seen)."""
    s, now, seen = start_step, start_time, []
    while now - start_time < seconds:
        steps, times, durs = [], [], []
        for _ in range(25):
            s += 1
            dt = 0.04 * level(now - T0) * math.exp(rng.gauss(0, 0.01))
            now += dt
            steps.append(s), times.append(now), durs.append(dt)
        engine.feed("j", 0, Steps(steps, times, durs, [0.0] * 25))
        engine.tick(now)
        engine.save(now)
        seen += [c for c in engine.conditions() if c.alertname == "StepwatchThroughputDrift"]
    return s, now, seen


def test_a_restart_keeps_the_settled_level_so_a_ramp_is_still_measured_from_it(tmp_path):
    """Six settled minutes, then a ramp starts; the collector restarts (a new engine on the same
    directory) two minutes into it. The new engine is armed at once and raises the ramp against
    the level the job settled at before the restart, not the level it had reached by then."""
    rng, store = random.Random(4), DriftStore(str(tmp_path))
    ramp = lambda t: 1.0 + 0.06 * min(1.0, max(0.0, t - 360) / 600)  # noqa: E731
    first = DetectionEngine(CFG, store)
    s, now, seen = _feed(first, rng, 0, T0, 480, ramp)
    assert seen == [] and first.armed()[("j", 0)]
    store.close()  # the collector is killed here
    again = DetectionEngine(CFG, DriftStore(str(tmp_path)))
    s, now, seen = _feed(again, rng, s, now, 900, ramp)
    assert seen, "the ramp was not raised after the restart"
    assert "vs this job's level settled at" in seen[0].summary and "(40.0 ms" in seen[0].summary, seen[0].summary


def test_an_open_episode_goes_on_after_a_restart(tmp_path):
    rng, store = random.Random(5), DriftStore(str(tmp_path))
    shift = lambda t: 1.12 if t >= 300 else 1.0  # noqa: E731
    first = DetectionEngine(CFG, store)
    s, now, seen = _feed(first, rng, 0, T0, 480, shift)
    assert seen and seen[-1].severity == "critical"
    since = seen[-1].since
    again = DetectionEngine(CFG, DriftStore(str(tmp_path)))
    _, _, seen = _feed(again, rng, s, now, 2, shift)
    assert seen and seen[0].severity == "critical" and seen[0].since == since, seen


def test_a_damaged_state_file_is_logged_and_detection_goes_on(tmp_path, caplog):
    (tmp_path / "detection.sqlite").write_bytes(b"not a database" * 100)
    store = DriftStore(str(tmp_path))
    engine = DetectionEngine(CFG, store)
    _, _, seen = _feed(engine, random.Random(1), 0, T0, 300, lambda t: 1.0)
    assert seen == [] and engine.armed()[("j", 0)]
    assert "detection state" in caplog.text and "detection goes on without it" in caplog.text
    try:
        sqlite3.connect(str(tmp_path / "detection.sqlite")).execute("SELECT 1 FROM drift").fetchall()
        damaged = False
    except sqlite3.DatabaseError:
        damaged = True
    assert damaged  # left as it was for a person to look at; never raised into detection
