"""Each rank's drift judged on its buckets' medians and on their floor (``RankDrift``).

The series are built like the real H200 hosts' steps (bench/results/real_h200zb.md): a floor with
runs of slower steps, the share of slow runs wandering from minute to minute."""

from __future__ import annotations

import dataclasses
import math
import random

from stepwatch.collector.detect import DriftConfig, RankDrift

T0 = 1_700_000_000.0


def _host(seconds: float, seed: int, added_ms: float = 0.0, at: float = math.inf):
    """(step, end time, seconds) of a 40 ms job on a host that runs 4 ms slower for a run of
    steps, the share of such runs wandering between 15% and 65% over minutes; ``added_ms``
    added to every step from ``at`` s on."""
    rng = random.Random(seed)
    t, step, slow = T0, 0, False
    while t - T0 < seconds:
        share = 0.5 + 0.3 * math.sin(2 * math.pi * (t - T0) / 60)
        if rng.random() < 0.1:  # runs of ~10 steps
            slow = rng.random() < share
        d = 0.040 * (1 + rng.gauss(0, 0.004)) + (0.004 if slow else 0.0)
        if t - T0 >= at:
            d += added_ms / 1e3
        t += d
        step += 1
        yield step, t, d


def _first_raise(cfg: DriftConfig, series) -> tuple:
    det = RankDrift(cfg, "j", 0)
    for step, t, d in series:
        det.feed(step, t, d)
        if det.condition is not None:
            return t - T0, det.condition
    return None, None


def test_a_cost_on_every_step_is_raised_from_the_floor_where_the_medians_wander():
    """+4 ms on every step (+10% of the floor) from 420 s: raised critical within a minute from
    the floor ("p10 step"); the medians alone, whose level wanders with the share of slow runs,
    raise nothing in the same time. The healthy twin raises nothing in 15 minutes."""
    at = 420.0
    when, cond = _first_raise(DriftConfig(), _host(at + 60, 3, 4.0, at))
    assert when is not None and at < when <= at + 60, when
    assert cond.severity == "critical" and "(p10 step " in cond.summary, cond
    medians = dataclasses.replace(DriftConfig(), floor_quantile=0.0)
    assert _first_raise(medians, _host(at + 60, 3, 4.0, at)) == (None, None)
    assert _first_raise(DriftConfig(), _host(900, 3)) == (None, None)


def test_the_shown_episode_never_drops_a_severity_when_its_detector_hands_over():
    """The floor raises critical first; when its episode clears while the median's is still
    open at warning, the episode goes on at critical, one condition throughout, its text the
    figure it stood at (never the median's warning-sized one under a critical severity)."""
    det = RankDrift(DriftConfig(), "j", 0)
    seen = []
    for step, t, d in _host(1200, 5, 6.0, 420.0):
        if t - T0 > 700:  # the floor back, the slow runs now in every step's wake
            d = 0.040 * 1.005 + (0.004 if step % 4 else 0.0)
        det.feed(step, t, d)
        if det.condition is not None:
            seen.append((det.condition.severity, "(p10 step " in det.condition.summary, det._src is det.median,
                         float(det.condition.summary.split("%")[0].split("+")[-1])))
        elif seen:
            break
    order = {"info": 0, "warning": 1, "critical": 2}
    assert seen and seen[0][:3] == ("critical", True, False), seen[:3]
    assert all(order[b[0]] >= order[a[0]] for a, b in zip(seen, seen[1:])), sorted(set(seen))
    assert any(x[2] for x in seen), sorted(set(x[:3] for x in seen))  # handed over to the median's episode
    assert all(x[3] >= 8.0 for x in seen if x[0] == "critical"), sorted(set(x[3] for x in seen))


def test_a_rank_that_settles_again_settles_both_detectors():
    """30% slower from 4.9 s of a job armed at ~5.8 s (settings shrunk to seconds), fed in one
    batch: the medians date the shift inside the settling time and settle again; the floor,
    which dated it a bucket later and raised it, settles again with them, nothing raised."""
    cfg = DriftConfig(bucket_s=0.5, min_bucket_steps=3, warmup_s=2, settle_s=3, critical_window_s=1,
                      warning_window_s=1.5, info_window_s=2)
    steps, times, secs, t = [], [], [], T0
    for s in range(1, 136):
        d = 0.05 if t - T0 < 4.9 else 0.065
        t += d
        if s > 10:
            steps.append(s), times.append(t), secs.append(d)
    det = RankDrift(cfg, "j", 0)
    det.feed_many(steps, times, secs)
    assert det.condition is None and not det.median.armed and not det.floor.armed
    assert det.median.settling_again_since == det.floor.settling_again_since is not None
    alone = RankDrift(dataclasses.replace(cfg, floor_quantile=0.0), "j", 0)
    alone.feed_many(steps, times, secs)
    assert alone.floor is None and alone.condition is None and not alone.armed


def test_an_episode_raised_without_evidence_shows_the_other_detectors_evidence_in_its_text():
    """The condition shown says how it was decided as its ``decided`` does: a floor episode the
    step times alone decided, while the medians' episode holds a phase's evidence, is shown with
    that evidence and its text ("a change of the job: ..."), never "no one thing ... holds it"
    beside decided "job"; a condition not known ("") takes it too; one already held keeps its own."""
    from stepwatch.collector.detect._drift_episode import DriftText, evidence_note
    from stepwatch.collector.detect._drift_pair import _with_evidence
    from stepwatch.collector.detect._types import Backing, Condition, Kind

    fwd = Backing(Kind.PHASE, "forward", 14.9, 19.0, "ms", 1.4, spreads=9.8, host_paced=True)
    base = "step time +8.1% vs the level before (p10 step 39.6 ms -> 42.8 ms) since step 19,824"
    held = Condition("StepwatchThroughputDrift", "j", 0, "warning", "median's" + evidence_note("job", fwd), T0,
                     evidence=fwd, decided="job")
    for decided in ("steps", ""):
        text = DriftText(0.081, "vs the level before", "p10 step ", 39.6, 19824, decided=decided)
        assert str(text) == base + evidence_note(decided, None)
        floor = Condition("StepwatchThroughputDrift", "j", 0, "critical", str(text), T0,
                          ratio=1.081, decided=decided, text=text)
        shown = _with_evidence(floor, held)
        assert shown.decided == "job" and shown.evidence == fwd and shown.severity == "critical", shown
        assert shown.summary == base + "; a change of the job: " + fwd.text(), shown.summary
    assert evidence_note("steps", None).startswith("; no one thing the agent measures")


def test_the_episode_s_further_changes_are_counted_by_the_pair_and_kept_across_a_restart():
    """+4 ms from 420 s (the floor raises it), +12 ms more from 560 s (a further change of the
    floor's episode): the shown condition's ``change`` moves 0 -> 1 with its onset, so the alert
    book takes the new onset. Saved and restored (as a collector restart does), the episode shows
    the same count and onset, so the book sees no change that did not happen; a state saved before
    the pair kept its count restores the shown detector's."""
    import json

    det = RankDrift(DriftConfig(), "j", 0)
    shown = []
    for step, t, d in _host(900, 5, 4.0, 420.0):
        det.feed(step, t, d + (0.012 if t - T0 > 560 else 0.0))
        c = det.condition
        if c is not None and (c.change, c.step) not in shown:
            shown.append((c.change, c.step))
    assert [k for k, _ in shown] == [0, 1] and shown[0][1] < shown[1][1], shown
    saved = json.loads(json.dumps(det.state()))
    for state in (saved, {k: v for k, v in saved.items() if k != "moved"}):
        again = RankDrift(DriftConfig(), "j", 0)
        again.restore(state)
        assert (again.condition.change, again.condition.step, again.condition.since) == (
            1, det.condition.step, det.condition.since), again.condition
