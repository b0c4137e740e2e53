"""Drift detector properties (Hypothesis): stationary noisy series stay quiet; sustained
shifts of 8-35% are flagged within the documented delay (min_duration_steps, or
min_duration_s of steps when that is longer, + 3 blocks after the shift, at default block size
and up to 2% per-step noise), larger ones (which noise can carry past the pause ratio) within
max_pause_steps + 3 blocks. Fast steps: a burst of a second is no drift."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings, strategies as st

from stepwatch.collector.detect import DetectionEngine, parse_detection

CFG = parse_detection({"warmup_steps": 10, "drift": {"baseline_steps": 300, "baseline_lag_steps": 50,
                                                     "min_baseline_steps": 200}})
SHIFT_AT = 400
STEP_S = 0.035
# the documented delay: min_duration_steps, or min_duration_s worth of steps when longer
DELAY = max(CFG.drift.min_duration_steps, math.ceil(CFG.drift.min_duration_s / STEP_S))  # (upper bound)


def _run(seed: int, noise: float, shift: float, steps: int, wobble: float = 0.0, pauses: bool = True,
         step_s: float = STEP_S, until: int = 0):
    rng, engine, first, now = random.Random(seed), DetectionEngine(CFG), None, 1e9
    for s in range(1, steps + 1):
        level = (1 + shift if SHIFT_AT <= s < (until or steps + 1) else 1.0) * (1 + wobble * math.sin(s / 400))
        t = step_s * level * math.exp(rng.gauss(0, noise))
        if s == 1 or (pauses and rng.random() < 0.01):
            t *= 200  # compilation, checkpoint or evaluation pause: one very long step
        now += t
        engine.step("j", 0, s, now, t)
        if first is None and any(c.alertname == "StepwatchThroughputDrift" for c in engine.conditions()):
            first = s
    return first


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), noise=st.floats(0.0, 0.05), wobble=st.floats(0.0, 0.02))
def test_stationary_noisy_series_raise_no_alert(seed, noise, wobble):
    assert _run(seed, noise, 0.0, 1500, wobble) is None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), noise=st.floats(0.0, 0.02), shift=st.floats(0.08, 0.35))
def test_sustained_shift_is_detected_within_documented_delay(seed, noise, shift):
    first = _run(seed, noise, shift, SHIFT_AT + DELAY + 60)
    assert first is not None and SHIFT_AT <= first <= SHIFT_AT + DELAY + 30, first


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32), noise=st.floats(0.0, 0.02), shift=st.floats(0.08, 0.35))
def test_fast_steps_a_burst_of_a_second_is_no_drift_a_lasting_shift_is(seed, noise, shift):
    """8 ms steps: +8..35% for 125 steps (1 s) raises nothing; the same shift for good raises
    once min_duration_s (5 s: 463-579 steps at the new level) has passed, and not before."""
    assert _run(seed, noise, shift, 2000, step_s=0.008, until=SHIFT_AT + 125) is None
    first = _run(seed, noise, shift, 2000, step_s=0.008)
    after = 5.0 / (0.008 * (1 + shift))  # steps in 5 s at the new level
    assert first is not None and SHIFT_AT + after <= first <= SHIFT_AT + 5.0 / 0.008 + 60, first


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), noise=st.floats(0.0, 0.02), shift=st.floats(0.35, 3.0))
def test_a_shift_near_or_beyond_the_pause_ratio_is_detected_after_max_pause_steps(seed, noise, shift):
    """Steps >= 1.5x baseline start pause runs (which go on down to 1.22x) until a run of
    max_pause_steps (100) shows the level moved; then the held steps count, so a shift near
    or beyond the pause ratio is found within max_pause_steps + 3 blocks."""
    first = _run(seed, noise, shift, SHIFT_AT + 300)
    assert first is not None and SHIFT_AT <= first <= SHIFT_AT + 100 + 30, first


def test_fast_steps_after_the_history_ring_is_full_a_shift_is_still_found():
    """8 ms steps: the jump test runs every few blocks when its windows are wide; past 20,000
    steps (the 2,000-block history is full) it still runs."""
    engine, rng, first, now = DetectionEngine(CFG), random.Random(5), None, 1e9
    for s in range(1, 27_001):
        t = 0.008 * (1.2 if s >= 25_000 else 1.0) * math.exp(rng.gauss(0, 0.01))
        now += t
        engine.step("j", 0, s, now, t)
        if first is None and any(c.alertname == "StepwatchThroughputDrift" for c in engine.conditions()):
            first = s
    assert first is not None and 25_000 + 5.0 / 0.0096 <= first <= 25_000 + 5.0 / 0.0096 + 100, first
