"""Straggler rank and liveness (stalled job, agent gone) through the DetectionEngine, on data
time only: ``tick(now)`` is called with the time to judge, nothing sleeps."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from stepwatch.collector.detect import DetectionEngine, parse_detection

T0 = 1_700_000_000.0


def run_job(engine, steps, ranks=4, step_s=0.1, jitter=0.0, slow_rank=None, slow_wait_s=0.0, slow_from=0,
            seed=0, first_alarm=None, start=1):
    """Synchronous job: every rank has the same step period; the slow rank's excess shows as
    data-loader wait (the others wait in the collective). Returns the first step with a straggler."""
    rng, t = random.Random(seed), T0 + start * step_s
    for s in range(start, start + steps):
        t += step_s
        for r in range(ranks):
            wait = 0.002 * (1 + rng.uniform(-jitter, jitter))
            if r == slow_rank and s >= slow_from:
                wait += slow_wait_s
            engine.step("j", r, s, t, step_s * (1 + rng.uniform(-jitter, jitter)), wait_s=wait)
        if first_alarm is None and stragglers(engine):
            first_alarm = s
    return first_alarm


def stragglers(engine):
    return {c.rank: c for c in engine.conditions() if c.alertname == "StepwatchStragglerRank"}


def test_slow_rank_is_named_after_8_of_10_blocks_and_cleared_after_it_recovers():
    e = DetectionEngine(parse_detection({"warmup_steps": 0}))
    first = run_job(e, 300, slow_rank=2, slow_wait_s=0.04, slow_from=150, jitter=0.02)
    got = stragglers(e)
    assert set(got) == {2}, got
    assert 150 + 70 <= first <= 150 + 90, first    # the 8th slow block of 10 steps
    summary = got[2].summary
    assert summary.startswith("rank 2 is a straggler: ") and "since step 150" in summary, summary
    assert 1.35 <= float(summary.split(": ", 1)[1].split("x", 1)[0]) <= 1.45, summary  # 1 + 40 ms / 100 ms
    assert got[2].step >= 150
    run_job(e, 100, slow_rank=None, start=301)  # recovered: fewer than 4 of the last 10 blocks slow
    assert not stragglers(e)


def test_a_rank_expired_by_the_collector_takes_its_straggler_alert_with_it():
    e = DetectionEngine(parse_detection({"warmup_steps": 0}))
    run_job(e, 300, slow_rank=1, slow_wait_s=0.05, slow_from=1)
    assert set(stragglers(e)) == {1}
    e.forget("j", 1)
    assert not stragglers(e)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32), jitter=st.floats(0.0, 0.1), ranks=st.integers(2, 8))
def test_ranks_with_only_jitter_are_never_stragglers(seed, jitter, ranks):
    e = DetectionEngine(parse_detection({"warmup_steps": 0}))
    assert run_job(e, 250, ranks=ranks, jitter=jitter, seed=seed) is None


def test_stall_after_max_of_minimum_and_factor_times_usual_step():
    e = DetectionEngine()
    for s in range(1, 51):
        e.step("j", 0, s, T0 + s * 0.5, 0.5)
    last = T0 + 25
    e.tick(last + 300)
    assert not e.conditions()
    e.tick(last + 301)
    (c,) = e.conditions()
    assert (c.alertname, c.severity, c.step, c.since) == ("StepwatchJobStalled", "critical", 50, last + 300)
    assert "after step 50" in c.summary
    e.step("j", 0, 51, last + 302, 0.5)  # the job moves again
    e.tick(last + 303)
    assert not e.conditions()


def test_slow_steps_raise_the_stall_limit():
    e = DetectionEngine(parse_detection({"liveness": {"stall_factor": 20, "stall_min_s": 60}}))
    for s in range(1, 11):
        e.step("j", 0, s, T0 + 10 * s, 10.0)     # 10 s steps: limit 200 s, not 60 s
    e.tick(T0 + 100 + 199)
    assert not e.conditions()
    e.tick(T0 + 100 + 201)
    assert [c.alertname for c in e.conditions()] == ["StepwatchJobStalled"]


def test_agent_gone_only_while_other_ranks_of_the_job_are_connected():
    e = DetectionEngine()
    for r in (0, 1):
        e.step("j", r, 1, T0, 0.1)
    e.connection("j", 1, False, T0 + 10)
    e.tick(T0 + 10 + 119)
    assert not e.conditions()
    e.tick(T0 + 10 + 120)
    (c,) = e.conditions()
    assert (c.alertname, c.rank, c.severity, c.since) == ("StepwatchAgentGone", 1, "critical", T0 + 10)
    e.connection("j", 0, False, T0 + 200)      # the whole job left: finished, not an incident
    e.tick(T0 + 201)
    assert not e.conditions()
    e.connection("j", 0, True, None)
    e.connection("j", 1, True, None)           # reconnected
    e.tick(T0 + 400)
    assert not [c for c in e.conditions() if c.alertname == "StepwatchAgentGone"]
