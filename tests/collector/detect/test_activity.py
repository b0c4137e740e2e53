"""The straggler rule's GPU-activity evidence (collector/detect/_activity.py) on series with
known answers: a rank whose GPU compute pipes grow busier than the others' is named with the
onset step; even ranks, a rank busier from the start, idle GPUs and a rank that stopped sending
name nobody. The real 2 x H200 recordings are tests/collector/detect/test_real_phases.py's."""

from __future__ import annotations

import random

import pytest

from stepwatch.collector.detect import DetectionConfig
from stepwatch.collector.detect._straggler import StragglerDetector

T0 = 1_800_000_000.0
STEP_S = 0.05


def _job(ranks: int, seconds: int, level, seed: int = 1, stop: dict = None, paused=lambda sec: False,
         paused_steps: int = 0) -> tuple:
    """Feed ``ranks`` ranks for ``seconds``: a second's steps and one GPU sample per rank per
    second; ``level(rank, t)`` is the rank's pipe activity at t s (noise +-2% added). ``stop``:
    {rank: second it stops sending}; ``paused(sec)``: no steps kept that second on any rank (the
    engine leaves a pause's steps out before they reach the rule) but ``paused_steps`` of them
    a second. (detector, [(t, changed)])."""
    rng = random.Random(seed)
    det = StragglerDetector(DetectionConfig().straggler, "job")
    per = int(1 / STEP_S)
    seen, counter = [], {}
    for sec in range(seconds):
        for rank in range(ranks):
            if stop and sec >= stop.get(rank, seconds):
                continue
            first, n = counter.get(rank, 0), paused_steps if paused(sec) else per
            steps = list(range(first, first + n))
            counter[rank] = first + n + (n < per)  # (a pause: one long step, left out upstream)
            ends = [T0 + sec + (i + 1) * STEP_S for i in range(n)]
            if steps:
                det.feed_many(rank, steps, ends, [STEP_S] * len(steps), [0.001] * len(steps))
            value = level(rank, sec) * (1 + rng.uniform(-0.02, 0.02))
            seen.append((sec, det.activity(rank, [T0 + sec + 0.5], [value])))
    return det, seen


def _named(det) -> dict:
    return {r: c for r, c in det.conditions.items() if "GPU is busier" in c.summary}


def test_a_rank_whose_gpu_grows_busier_is_named_with_its_onset_step_within_a_minute():
    det, seen = _job(2, 300, lambda r, t: 0.26 if r == 1 and t >= 200 else 0.21)
    named = _named(det)
    assert set(named) == {1}, det.conditions
    cond = named[1]
    first = next(t for t, changed in seen if changed)
    assert 200 < first <= 260, first  # four 5 s buckets and the wait for both ranks' samples
    assert abs(cond.since - (T0 + 200)) <= 5, cond.since - T0
    assert abs(cond.step - 200 / STEP_S) <= 1 / STEP_S, cond.step  # the step at the onset, not at the raise
    assert "active 26% of the time vs 21%" in cond.summary and "1.00x when the job settled" in cond.summary, \
        cond.summary


def test_the_rank_is_cleared_when_its_gpu_is_even_again():
    det, seen = _job(2, 400, lambda r, t: 0.30 if r == 1 and 200 <= t < 280 else 0.20)
    assert _named(det) == {}, det.conditions
    assert [changed for _, changed in seen].count(True) == 2  # named once, cleared once


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_even_ranks_with_noise_name_nobody(ranks):
    for seed in range(5):
        det, seen = _job(ranks, 400, lambda r, t: 0.2 + 0.05 * (t // 60 % 2), seed=seed)  # the job's own waves
        assert det.conditions == {} and not any(c for _, c in seen), (ranks, seed, det.conditions)


def test_a_rank_busier_from_the_start_is_its_reference_and_not_named():
    """A shared GPU or a pipeline stage with more work: learnt while the reference is taken."""
    det, _ = _job(2, 400, lambda r, t: 0.40 if r == 0 else 0.20)
    assert det.conditions == {}


def test_one_of_four_ranks_is_named_and_only_it():
    det, _ = _job(4, 300, lambda r, t: 0.35 if r == 2 and t >= 180 else 0.25)
    assert set(_named(det)) == {2}, det.conditions


def test_idle_gpus_are_even():
    """Under the floor both ways (a CPU-bound phase, a GPU that waits): no ratio of noise."""
    det, _ = _job(2, 400, lambda r, t: 0.015 if r == 1 and t >= 200 else 0.001)
    assert det.conditions == {}


def test_a_rank_that_stops_sending_holds_the_others_for_seconds_only():
    """Rank 1's samples stop at 250 s: rank 0's buckets are judged alone (one rank: nothing to
    compare) after _LAG buckets; nothing is named, and nothing piles up."""
    det, _ = _job(2, 400, lambda r, t: 0.2, stop={1: 250})
    assert det.conditions == {}
    assert len(det._activity._open) <= 8, len(det._activity._open)


def test_a_forgotten_rank_drops_its_flag():
    det, _ = _job(2, 300, lambda r, t: 0.30 if r == 1 and t >= 200 else 0.20)
    assert set(_named(det)) == {1}
    assert det.forget(1) and det.conditions == {}


def test_an_evaluation_on_rank_0_alone_names_nobody():
    """``if rank == 0: evaluate()`` for 60 s every 2 minutes: rank 0's GPU busy, the others idle
    at the next collective, and no rank's steps kept (each rank's step around it is a pause).
    Those buckets are not the training's and are not judged."""
    def evaluating(sec):
        return sec >= 150 and sec % 120 < 60

    for kept in (0, 1):  # (1: a step a second still kept, its batches going on: 5% of the time)
        det, seen = _job(2, 600, lambda r, t: (0.45 if r == 0 else 0.02) if evaluating(t) else 0.21,
                         paused=evaluating, paused_steps=kept)
        assert det.conditions == {} and not any(c for _, c in seen), (kept, det.conditions)
    # the same GPUs while the steps go on: rank 0 named inside its fourth busy minute (the rule
    # is not blind to it)
    det, _ = _job(2, 530, lambda r, t: (0.45 if r == 0 else 0.02) if evaluating(t) else 0.21)
    assert set(_named(det)) == {0}, det.conditions
