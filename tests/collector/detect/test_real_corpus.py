"""The real corpus (tests/data/real: collector recordings of real jobs on lent H100s, README
beside them) replayed through the collector's own pipeline at default detection settings:
every healthy recording raises nothing, at any severity; changes injected into a real series
(the times after the change moved by the time added) are raised within the issue's targets.
The full table, held-out part included, is bench/detection_real.py's."""

from __future__ import annotations

import pathlib
import statistics

import pytest

from stepwatch.collector._replay import replay
from stepwatch.collector.alerting._book import unix
from stepwatch.collector.detect import DetectionConfig, DriftConfig
from stepwatch.collector.tools.corpus import (events, first_step_time, grow, inject, load, pulse_end, pulses,
                                              rank_steps, reach_at, repeat, seams, slow_loader)

REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"
CORPUS = sorted(p.name for p in REAL.glob("*.jsonl.gz"))
# The h100b jobs carry a real host-wide slowdown from 12:46:00 UTC on (README): not quiet.
HOST_SHIFT_AT = 1795697160.0
SHIFTED = [n for n in CORPUS if n.startswith("h100b_")]
# A 2-GPU job whose host's speed wandered +-10% in waves of minutes (README): not quiet either.
WANDERING = ["h100c_2gpu_m.jsonl.gz"]
# A launch-bound H200 job whose host got slower in its last minutes and stayed so (README): 20 s
# medians 10.2 ms at 280 s, 13.9-15.3 ms from 480 s, the SM clock flat at 1,980 MHz and every
# phase's host time grown with it; the same machine kind slowed a launch-bound job 10.9 ->
# 16.4 ms over 12 minutes across fresh processes (bench/results/agent_ab_h200w.md). Counted as
# healthy until 2026-11-29 (its warning a "known miss"); a real +17% for minutes is raised.
# h200u_1gpu_xs (the same machine kind, a later day): 20 s medians 10.0-10.9 ms for 4 minutes,
# 11.2-12.3 ms from 250 s to 560 s, back to 9.5-10.7 ms in its last minute; the SM clock flat,
# GPU utilisation 0.58 -> 0.52-0.55 and every phase's host time up with the step.
# Each: the seconds after its first step before which the host was at its level.
HOST_SLOWED = {"h200y_1gpu_s.jsonl.gz": 300, "h200u_1gpu_xs.jsonl.gz": 230}
# 2 x H200 NCCL DDP jobs at the defaults (2026-11-29, bench/results/real_h200t.md; SM clock flat at
# 1,980 MHz, GPU utilisation down, every phase's host time up) whose host got slower: (the seconds
# after the first step before which the host was at its level, the alerts raised).
# h200t_2gpu_s (launch-bound): the host slowed by degrees. 5 s medians against the settled
# level: +9..17% for 15 s from 225 s, ~0 for 15 s, +2..9% from 255 s, +4..12% from 300 s to its
# end. Raised from 220 s on (dated in the first step, the hump; rank 0's episode shows the
# further change at 300 s), as on h200y; before it, rank 0's host ran its phases 1.09x the
# other's for a minute and rank 0 was warned as a straggler: **a false straggler**, kept visible.
# (h200t_2gpu_m_short's hump, +8-14% for 90 s from 165 s, raised critical on both ranks live
# at 190 s, began inside the settling time: the rank settles again and it is quiet.)
HOST_SLOWED_2GPU = {
    "h200t_2gpu_s.jsonl.gz": (220, [("StepwatchStragglerRank", 0), ("StepwatchThroughputDrift", 0),
                                    ("StepwatchThroughputDrift", 1)])}
# A healthy 2 x H200 job (held out) whose whole step distribution stepped up in its last 80 s:
# 20 s 10th percentiles 43.0-43.9 ms, then 47.6, 44.5, 46.5 ms (medians 44-47 -> 48-50.6 ms),
# as in its first 80 s. Its phase times hold none of it (the host's pace): the floor's +8.4% for
# 76 s is short of what a shift that nothing holds needs (a severity's full ratio over two of its
# windows), so it is quiet; judged on the step times alone the floor raises it critical.
# (seconds after the first step from which the floor stands up)
FLOOR_STEPPED = {"h200t_2gpu_m_sched_short.jsonl.gz": 240}
# (h200zw_1gpu_s, a healthy launch-bound H200 job held out, live at 34c07bd, bench/results/
# real_h200zw.md: its host's pace rose +10..25% for about 45 s from 308 s over a level before at
# the low side of its wander, raised critical live with no evidence; quiet since a shift that
# nothing holds is judged against the settled level when the level before is a dip within the
# job's noise, _drift_tests.ShiftTests.within_noise_under: one of the QUIET ones.)
QUIET = [n for n in CORPUS if n not in SHIFTED + WANDERING + list(HOST_SLOWED) + list(HOST_SLOWED_2GPU)]


@pytest.fixture(scope="module")
def lines():
    cache = {}

    def get(name: str) -> list:
        if name not in cache:
            cache[name] = load(str(REAL / name))
        return cache[name]

    return get


def test_the_corpus_is_there_with_its_readme():
    assert len(CORPUS) >= 5, CORPUS
    readme = (REAL / "README.md").read_text()
    for name in CORPUS:
        assert name in readme, f"{name} is not described in tests/data/real/README.md"


@pytest.mark.parametrize("name", QUIET)
def test_a_healthy_real_recording_raises_nothing(name, lines):
    alerts = replay(events(lines(name)), DetectionConfig())
    assert alerts == [], [(a.alertname, a.rank, a.severity, a.fired_summary) for a in alerts]


@pytest.mark.parametrize("name, quiet_until_s", sorted(FLOOR_STEPPED.items()))
def test_a_floor_step_that_nothing_holds_needs_more_than_a_change_of_the_job(name, quiet_until_s, lines):
    """The whole step distribution stepped up +8% in the last 80 s with no evidence: quiet at the
    defaults (it is one of QUIET too). Judged on the step times alone (no evidence read), the
    floor raises it: what quiets it is that its phase times were compared and hold nothing. The
    same +8% made of the backward's device time is raised as a change of the job within a minute
    (on one rank by the backward, on the other by the GPU's busy time that grew with it)."""
    start = first_step_time(lines(name))
    alone = replay(events(lines(name)), DetectionConfig(drift=DriftConfig(evidence=False)))
    assert alone and all(a.starts_at - start >= quiet_until_s and "(p10 step " in a.fired_summary
                         for a in alone), [(a.starts_at - start, a.fired_summary) for a in alone]
    at = start + quiet_until_s + 10
    changed = inject(lines(name), "step", 0.08, at, 0.0, "backward")
    raised = replay(events(changed), DetectionConfig())
    assert raised and all(a.decided == "job" and a.fired_at - at <= 60 for a in raised), \
        [(a.fired_at - at, a.decided, a.evidence) for a in raised]
    assert any(a.evidence["name"] == "backward" for a in raised), [a.evidence for a in raised]


@pytest.mark.parametrize("name, level_until_s", sorted(HOST_SLOWED.items()))
def test_a_host_that_slowed_for_minutes_is_raised_as_the_host(name, level_until_s, lines):
    """One episode, its onset after the host left its level
    (nothing before), named as the host (the phases that grew each host-bound, by like shares of
    their time) with the GPU's clocks unchanged: the host, not the job's code or the GPU. On
    h200u the episode was still open when the job ended a minute after recovering: the
    diagnosis, redone to the end, must still read the slow minutes (10 recent steps a row
    against 200 in the merged older rows)."""
    start = first_step_time(lines(name))
    (a,) = replay(events(lines(name)), DetectionConfig())
    # (h200y's floor, its steps' 10th percentile, stepped up at once: raised against the level
    # just before, as the median detector raises against the settled level)
    assert a.alertname == "StepwatchThroughputDrift" and \
        ("vs this job's level" in a.fired_summary or "vs the level before" in a.fired_summary), a
    assert a.starts_at - start >= level_until_s, a.starts_at - start
    assert a.diagnosis.startswith("host +") and "slower in every phase that grew (backward +" in a.diagnosis, a.diagnosis
    assert "clocks unchanged" in a.diagnosis, a.diagnosis


@pytest.mark.parametrize("name", sorted(HOST_SLOWED_2GPU))
def test_a_2_gpu_host_that_slowed_is_raised_on_both_ranks_as_host_bound(name, lines):
    """Each rank's drift raised once (warning or critical), against the job's settled level, its
    onset after the host left its level, named as the host with the GPU's clocks unchanged (live, rank 1's
    listed its host-bound phases one by one: the 1.5 ms data phase's share, +19%, set them
    apart); nothing else than the alerts listed above (what the live collector raised)."""
    level_until_s, expected = HOST_SLOWED_2GPU[name]
    start = first_step_time(lines(name))
    alerts = replay(events(lines(name)), DetectionConfig())
    assert sorted((a.alertname, a.rank) for a in alerts) == expected, \
        [(a.alertname, a.rank, a.starts_at - start, a.fired_summary) for a in alerts]
    for a in alerts:
        if a.alertname != "StepwatchThroughputDrift":
            assert a.state == "resolved" and a.severity == "warning", a
            continue
        assert a.severity in ("warning", "critical") and "vs this job's level" in a.fired_summary, a.fired_summary
        assert a.starts_at - start >= level_until_s, a.starts_at - start
        # the host named, or the phase named first host-bound and the host's CPU time grown in
        # the host-bound phases (rank 1's sync, +0.3 ms/step of waiting for rank 0, holds a
        # quarter of its growth; raised at its first degree, the phases grew 2.5x apart: the
        # host's phases then hold under the share that makes them one "host" contributor)
        first = a.diagnosis.split(";")[0]
        assert a.diagnosis.startswith("host +") or ("(host-bound: " in first and
                                                    "host CPU +" in a.diagnosis), a.diagnosis
        assert "clocks unchanged" in a.diagnosis, a.diagnosis


@pytest.mark.parametrize("name", SHIFTED)
def test_the_real_host_wide_slowdown_is_raised_and_nothing_before_it(name, lines):
    """Three jobs side by side on one host got 3-15% slower together at 12:46 UTC (GPU clocks
    unchanged, GPU utilisation down): each raises drift with its onset within a minute after
    12:46 (or in the 5 s bucket before it: the minute is read off 10 s medians), raised within
    4 minutes; nothing before it."""
    alerts = replay(events(lines(name)), DetectionConfig())
    assert alerts, "the host-wide slowdown was not raised"
    for a in alerts:
        assert a.alertname == "StepwatchThroughputDrift", a.alertname
        assert -5 <= a.starts_at - HOST_SHIFT_AT <= 60 and a.fired_at - HOST_SHIFT_AT <= 240, \
            (a.starts_at - HOST_SHIFT_AT, a.fired_at - HOST_SHIFT_AT, a.fired_summary)


@pytest.mark.parametrize("name", WANDERING)
def test_a_wandering_host_raises_its_first_wave_only(name, lines):
    """The job's 10 s medians went 41-54 ms in waves of 1-3 minutes (the windows-off arm on the
    same machine too). The first wave each rank saw is raised and resolves by itself; after
    it, waves of that size raise nothing (collector/detect/_drift.py, "Waves"). A miss
    against "no alert on a healthy job", kept visible here."""
    alerts = replay(events(lines(name)), DetectionConfig())
    ranks = [a.rank for a in alerts]
    assert sorted(ranks) == sorted(set(ranks)), [(a.rank, a.fired_summary) for a in alerts]
    cfg = DetectionConfig().drift
    for a in alerts:
        assert a.alertname == "StepwatchThroughputDrift" and a.state == "resolved", a
        assert a.ends_at - a.starts_at <= cfg.transient_s + DetectionConfig().resolve_hold_s, a


@pytest.mark.parametrize("ratio, severity, within_s", [(0.10, "critical", 60), (0.05, "warning", 180)])
def test_a_shift_injected_into_a_real_series_is_raised_in_time(ratio, severity, within_s, lines):
    series = lines("h100_1gpu_m_pauses.jsonl.gz")
    at = first_step_time(series) + 240
    alerts = replay(events(inject(series, "step", ratio, at, 0)), DetectionConfig())
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) == 1, [(a.severity, a.fired_summary) for a in alerts]
    (a,) = drift
    assert a.history[0][1] == severity and a.fired_at - at <= within_s, (a.history, a.fired_at - at)
    assert abs(a.starts_at - at) <= 30, a.starts_at - at


def test_a_repeated_recording_is_one_job_without_gaps(lines):
    """Three copies of a real recording play as one job: step numbers and end times rise, and
    no seam leaves a longer silence than the recording's own longest (its 4 s evaluations)
    plus the second between copies; the copies after the first leave out the warm-up."""
    def steps(series):
        return sorted((int(s["step"]), float(s["end_time_s"])) for o in series if o["kind"] == "batch"
                      for s in o["batch"].get("steps", ()))

    one = steps(lines("h100_1gpu_m_pauses.jsonl.gz"))
    three = steps(repeat(lines("h100_1gpu_m_pauses.jsonl.gz"), 3))
    gaps = [b[1] - a[1] for a, b in zip(three, three[1:])]
    longest = max(b[1] - a[1] for a, b in zip(one, one[1:]))
    assert min(gaps) > 0 and max(gaps) <= longest + 1.0 + 0.5, (min(gaps), max(gaps), longest)
    body = [t for t in one if t[1] >= one[0][1] + 180.0]  # the copies: batches sent from 180 s on
    per_copy = (len(three) - len(one)) / 2
    assert len(body) <= per_copy <= 1.01 * len(body) and len({s for s, _ in three}) == len(three)
    assert three[-1][1] - three[0][1] < 3 * (one[-1][1] - one[0][1])  # two warm-ups shorter


def _durations(series: list, rank: int = 0) -> list[tuple[int, float, float]]:
    """(step, end time, duration) of one rank's steps, in step order."""
    return sorted((int(s["step"]), float(s["end_time_s"]), float(s["duration_s"])) for o in series
                  if o["kind"] == "batch" and int(o.get("rank", 0)) == rank for s in o["batch"].get("steps", ()))


def test_a_recording_repeated_at_matching_levels_has_seams_no_larger_than_its_own_steps(lines):
    """The held-out 44 ms job whose end stands +8% off its third minute: repeated as it is, each
    seam is a +8% step in its median; cut where the levels match (corpus.matched_cut: from
    275 s to 610 s), the seams' 30 s medians and 10th percentiles either side agree within 1%,
    step numbers and end times rise, and no seam is a longer silence than the 1 s between copies."""
    one = lines("h100d_1gpu_m.jsonl.gz")

    def seam_steps(series):
        steps = _durations(series)
        out = []
        for t in seams(series):
            before = sorted(d for _, e, d in steps if t - 30 <= e < t)
            after = sorted(d for _, e, d in steps if t <= e < t + 30)
            out.append(max(abs(statistics.median(after) / statistics.median(before) - 1),
                           abs(after[len(after) // 10] / before[len(before) // 10] - 1)))
        return out, steps

    plain, _ = seam_steps(repeat(one, 3))
    matched, steps = seam_steps(repeat(one, 3, match=True))
    assert len(plain) == len(matched) == 2
    assert min(plain) > 0.05 and max(matched) < 0.01, (plain, matched)
    assert all(b[0] > a[0] and b[1] > a[1] for a, b in zip(steps, steps[1:]))
    assert max(b[1] - a[1] for a, b in zip(steps, steps[1:])) < 1.5


def test_an_hour_long_ramp_in_real_noise_is_raised_and_the_healthy_hour_is_quiet(lines):
    """The 140 ms job played ten times at matching levels (~85 minutes of its own noise): nothing
    raised as it is; +5% ramped in over 60 minutes from 240 s is raised no later than 10 minutes
    after it reached +5%, once, against the job's settled level."""
    series = repeat(lines("h100_1gpu_l.jsonl.gz"), 10, match=True)
    at = first_step_time(series) + 240
    assert max(float(o["time"]) for o in series) > at + 3600 + 600
    assert replay(events(series), DetectionConfig()) == []
    alerts = replay(events(inject(series, "ramp", 0.05, at, 3600)), DetectionConfig())
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) == 1 and drift[0].fired_at <= at + 3600 + 600, [(a.severity, a.fired_summary) for a in alerts]
    assert "vs this job's level settled at" in drift[0].fired_summary, drift[0].fired_summary


@pytest.mark.parametrize("name", ["h100_1gpu_l.jsonl.gz", "h200x_1gpu_m.jsonl.gz"])
def test_a_change_that_goes_away_is_one_episode_resolved_within_two_minutes(name, lines):
    """+10% for 5 minutes from 240 s into a held-out real job (played twice at matching levels:
    room after the change), made of the backward's device time, then back: one drift episode,
    raised within 60 s, its severity only rising, open while the change lasts and resolved within
    2 minutes of its end (issue 31's recovery target, on the job's own noise). The same change
    with nothing but the step time moving (the host's own pace) is one episode too, resolved as
    soon, raised within 90 s: a shift that nothing holds needs its full ratio over two windows
    (the H200 job's: 85 s)."""
    series = repeat(lines(name), 2, match=True)
    at = first_step_time(series) + 240
    over = pulse_end(series, at, 300, 0.10)
    for where, within in (("backward", 60), (None, 90)):
        alerts = replay(events(inject(series, "pulse", 0.10, at, 300, where)), DetectionConfig())
        drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
        assert len(drift) == 1, (where, [(a.severity, a.fired_summary) for a in alerts])
        (a,) = drift
        levels = [("info", "warning", "critical").index(sev) for _, sev in a.history]
        assert levels == sorted(set(levels)), a.history
        assert a.fired_at - at <= within and a.ends_at is not None and over <= a.ends_at <= over + 120, \
            (where, a.fired_at - at, None if a.ends_at is None else a.ends_at - over)


def test_an_injected_change_moves_the_phase_times_with_their_steps(lines):
    """+10% from 240 s: every sampled phase time keeps the end time of its own step."""
    series = lines("h200zb_2gpu_m.jsonl.gz")
    changed = inject(series, "step", 0.10, first_step_time(series) + 240, 0)
    for rank in (0, 1):
        ends = {k: e for k, (e, _) in rank_steps(changed, rank).items()}
        phases = [(int(x["step"]), float(x["end_time_s"])) for o in changed
                  if o["kind"] == "batch" and int(o.get("rank", 0)) == rank for x in o["batch"].get("phase_times", ())]
        assert len(phases) > 100
        assert max(abs(ends[k] - e) for k, e in phases if k in ends) < 0.005, rank


def test_work_the_host_waits_for_grows_a_phases_host_time_with_its_device_time(lines):
    """+10% from 240 s made of backward's work: as device work alone ("backward") its sampled
    device time grows by its step's time added and its host time stays; as work the host waits
    for inside the phase ("backward+host", a live launch-bound H100 job's GEMMs,
    tests/data/real/diag/h100z) both grow by it; the other phases stay. A shape that names no
    phase is refused with the shapes it takes."""
    series = lines("h200zw_1gpu_s.jsonl.gz")
    at = first_step_time(series) + 240

    def sampled(changed):
        return {int(x["step"]): x for o in changed if o["kind"] == "batch"
                for x in o["batch"].get("phase_times", ())}

    before = sampled(series)
    for where, host_grows in (("backward", False), ("backward+host", True)):
        after = sampled(inject(series, "step", 0.10, at, 0, where))
        late = [k for k, x in before.items() if float(x["end_time_s"]) > at + 5]
        assert len(late) > 100
        for k in late:
            grew = after[k]["backward_s"] - before[k]["backward_s"]
            assert grew > 0, (where, k)
            assert abs(after[k]["host_backward_s"] - before[k]["host_backward_s"] - (grew if host_grows else 0)) < 1e-9
            assert after[k]["forward_s"] == before[k]["forward_s"]
            assert after[k]["host_forward_s"] == before[k]["host_forward_s"]
    with pytest.raises(ValueError, match="'loader\\+host'"):
        inject(series, "step", 0.10, at, 0, "loader+host")


def test_a_ramp_injected_into_a_real_series_is_raised_against_the_settled_level(lines):
    """+5% over 15 minutes into the 44 ms job played three times in a row (33 minutes): raised
    no later than 10 minutes after it reached +5%, against the job's settled level."""
    series = repeat(lines("h100_1gpu_m_pauses.jsonl.gz"), 3)
    at = first_step_time(series) + 240
    alerts = replay(events(inject(series, "ramp", 0.05, at, 900)), DetectionConfig())
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) == 1, [(a.severity, a.fired_summary) for a in alerts]
    assert drift[0].fired_at <= at + 900 + 600
    assert "vs this job's level settled at" in drift[0].fired_summary, drift[0].fired_summary


def test_a_slow_loader_ramp_on_a_launch_bound_host_is_raised_on_its_evidence_since_settling(lines):
    """The held-out launch-bound H200 job (11.8 ms steps, its 10-s medians wobbling 15-20%) played
    six times at matching levels; the loader's wait ramped to +5% of the step over 15 minutes
    from 270 s. At any onset the level before holds most of a ramp, and the host's wander keeps
    the step under ``z`` of its spreads: never raised before. Its wait read against the rank's
    settling span stands out (``ShiftTests.since_settled``): raised no later than 10 minutes
    after it reached +5%, against the settled level, as a change of the job naming the wait, in
    one episode that stays open while the wait stays grown (``ShiftTests.slow_holds``)."""
    series = repeat(lines("h200zw_1gpu_s.jsonl.gz"), 6, match=True)
    at = first_step_time(series) + 270
    alerts = replay(events(inject(series, "ramp", 0.05, at, 900, "loader")), DetectionConfig())
    slow = [a for a in alerts if a.alertname == "StepwatchThroughputDrift" and a.fired_at >= at
            and "data-loader wait" in a.fired_summary]
    assert len(slow) == 1, [(a.fired_at - at, a.fired_summary) for a in alerts]
    (a,) = slow
    assert a.fired_at <= at + 900 + 600 and a.decided == "job" and a.ends_at is None, (
        a.fired_at - at - 900, a.decided, a.ends_at)
    assert "vs this job's level settled at" in a.fired_summary, a.fired_summary


def test_a_slow_backward_ramp_on_a_launch_bound_host_is_raised_on_its_device_time_beyond_the_host(lines):
    """The held-out launch-bound H200 job played six times at matching levels; backward's device
    time ramped to +5% of the step over 30 minutes from 240 s (its host time as before). No
    onset shows a ramp, and backward's device time wanders with the host's pace (8-9% between
    adjacent 10-s blocks) further than the ramp moves it in minutes: never raised before. Its
    device time beyond its host time, which stood near nothing while the rank settled, holds the
    step's growth (``ShiftTests.since_settled``): raised no later than 10 minutes after the ramp
    reached +5%, against the settled level, as a change of the job naming backward, in one
    episode that stays open. (The host's own rise early in the ramp, +15% for about a minute
    over a dip, is raised on the steps alone and ends, as without the ramp's reading.)"""
    series = repeat(lines("h200zw_1gpu_s.jsonl.gz"), 6, match=True)
    at = first_step_time(series) + 240
    alerts = replay(events(inject(series, "ramp", 0.05, at, 1800, "backward")), DetectionConfig())
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift" and a.fired_at >= at]
    slow = [a for a in drift if "backward" in a.fired_summary]
    assert len(slow) == 1, [(a.fired_at - at, a.fired_summary) for a in alerts]
    assert all(a.decided == "steps" and a.ends_at is not None and a.fired_at < at + 600 for a in drift if a not in slow), [
        (a.fired_at - at, a.decided, a.fired_summary) for a in drift]
    (a,) = slow
    assert a.fired_at <= at + 1800 + 600 and a.decided == "job" and a.ends_at is None, (
        a.fired_at - at - 1800, a.decided, a.ends_at)
    assert "vs this job's level settled at" in a.fired_summary, a.fired_summary
    assert "backward's device time beyond its host time" in a.fired_summary, a.fired_summary


def test_one_slow_data_loader_in_a_real_2_gpu_job_is_named_once(lines):
    """Rank 1's data loader 20 ms slower per step (+40% of the 50 ms step) from 240 s into the
    held-out real 2-GPU DDP job, every rank's step longer by it (lockstep): rank 1 is named a
    straggler within a minute, in one episode, with its onset within 30 s; rank 0 never."""
    series = lines("h100d_2gpu_m.jsonl.gz")
    at = first_step_time(series) + 240
    alerts = replay(events(slow_loader(series, 1, 0.020, at)), DetectionConfig())
    named = [a for a in alerts if a.alertname == "StepwatchStragglerRank"]
    assert [a.rank for a in named] == [1], [(a.rank, a.fired_summary) for a in named]
    assert named[0].fired_at - at <= 60 and abs(named[0].starts_at - at) <= 30, (named[0].fired_at - at, named[0].starts_at - at)
    assert "data-loader wait" in named[0].fired_summary, named[0].fired_summary


def test_a_loader_change_as_a_host_wave_recedes_is_dated_by_the_loader_wait(lines):
    """The held-out launch-bound H100 job's host ran ~10% slower from ~212 s (a wave under its
    steps' own spreads, raised by nothing) and receded as its data loader grew +10% of the step
    at 270 s: the step stood no higher after 270 s than on the wave, so the steps date the
    raised shift at the wave; the loader's wait, which holds it, dates it at its own change."""
    series = lines("h100c_1gpu_s.jsonl.gz")
    at = first_step_time(series) + 270
    alerts = [a for a in replay(events(inject(series, "step", 0.10, at, 0, "loader")), DetectionConfig())
              if a.alertname == "StepwatchThroughputDrift"]
    assert len(alerts) == 1, [(a.starts_at - at, a.fired_summary) for a in alerts]
    (a,) = alerts
    assert 0 <= a.starts_at - at <= 10 and a.fired_at - at <= 60, (a.starts_at - at, a.fired_at - at)
    assert a.decided == "job" and a.evidence["name"] == "data-loader wait", (a.decided, a.evidence)


def test_a_slower_loader_on_a_host_that_sped_up_is_raised_against_the_seconds_before_it(lines):
    """The held-out live H200 job h200zz (size m; its host's pace moved the 5-s medians 39-54 ms):
    its data loader slowed at 315 s from the first step (wait 0.2 -> 5 ms, a batch every 4.1 ms
    more), taking the step from the host's 40 ms back to 46 ms, its settled level: +13.5% over
    the 30 s before, 0% over the settled level and the 2 minutes before. The loader's wait dates
    the change and holds it, many of its own spreads out: raised within 45 s, dated within 5 s of
    315 s, decided by the loader's data phase, resolved within 2 minutes of its end (375 s);
    nothing raised before it (the GEMMs in backward at 195-255 s stood +3% on those levels and
    0..+5% on the seconds before them: not raised)."""
    series = load(str(REAL / "diag" / "h200zz_1gpu_m_restarts.jsonl.gz"))
    t0 = first_step_time(series)
    drift = [a for a in replay(events(series), DetectionConfig()) if a.alertname == "StepwatchThroughputDrift"]
    assert drift and all(a.onset - t0 >= 300 for a in drift), [(a.onset - t0, a.fired_summary) for a in drift]
    loader = [a for a in drift if a.onset - t0 < 400]
    assert len(loader) == 1, [(a.onset - t0, a.fired_summary) for a in drift]
    (a,) = loader
    assert abs(a.onset - t0 - 315) <= 5 and a.fired_at - t0 - 315 <= 45, (a.onset - t0, a.fired_at - t0)
    assert a.decided == "job" and a.evidence["name"] in ("data", "data-loader wait"), (a.decided, a.evidence)
    assert a.ends_at is not None and a.ends_at - t0 - 375 <= 120, a.ends_at and a.ends_at - t0

def test_a_phase_change_as_a_host_hump_recedes_is_raised_against_the_seconds_before_it(lines):
    """The held-out 2 x H200 job h200za_2gpu_m_sched_short settled on its host's hump (20 s
    medians 50.3-54.3 ms for 3.5 minutes), which ended at ~225 s (46 ms); backward's device time
    +10% of the step from 240 s takes the step back to the settled level: 0% over it and over
    the 2 minutes before, +10% over the 30 s before. Backward's own change dates it and holds it
    (its device time, not paced by the host): raised on both ranks, decided by backward, within
    80 s (75 s; never before a phase's change was read against the seconds before it), dated
    within 30 s of 240 s."""
    series = load(str(REAL / "h200za_2gpu_m_sched_short.jsonl.gz"))
    t0 = first_step_time(series)
    at = t0 + 240
    drift = [a for a in replay(events(inject(series, "step", 0.10, at, 0, where="backward")), DetectionConfig())
             if a.alertname == "StepwatchThroughputDrift"]
    assert sorted(a.rank for a in drift) == [0, 1], [(a.rank, a.onset - at, a.fired_summary) for a in drift]
    for a in drift:
        assert 0 <= a.onset - at <= 30 and a.fired_at - at <= 80, (a.rank, a.onset - at, a.fired_at - at)
        assert a.decided == "job" and a.evidence["name"] == "backward", (a.rank, a.decided, a.evidence)


def test_a_slow_gpu_memory_leak_on_a_large_allocation_is_warned_within_two_hours(lines):
    """The recording with the largest allocation (15.6 GB allocated of 85 GB), played 14 times
    as a 2.8-hour job: silent as recorded; 3 GiB/h of growth injected into its allocator and
    NVML series (+8% in 25 min: under both least growths) is warned by the 100-minute window
    within 2 hours, 12 GiB/h within 30 minutes (bench/results/detection_memory_real.md)."""
    job = repeat(lines("h100_1gpu_l.jsonl.gz"), 14)
    memory = ("StepwatchGpuMemoryLeak", "StepwatchMemoryExhaustionForecast")
    assert not [a for a in replay(events(job), DetectionConfig()) if a.alertname in memory]
    at = first_step_time(job) + 240
    for per_h, within_s, window in ((3, 7200, "over 100 min"), (12, 1800, "over 25 min")):
        raised = [a for a in replay(events(grow(job, per_h * 2**30 / 3600, at)), DetectionConfig())
                  if a.alertname in memory]
        assert raised and raised[0].fired_at - at <= within_s, (per_h, [(a.fired_at - at, a.summary) for a in raised])
        assert raised[0].alertname == "StepwatchGpuMemoryLeak" and window in raised[0].fired_summary, raised[0]


@pytest.mark.parametrize("name, blind", [("h200x_2gpu_m.jsonl.gz", True), ("h200y_1gpu_l.jsonl.gz", False)])
def test_the_reach_read_before_a_change_says_whether_it_will_be_raised(name, blind, lines):
    """Each rank's reach (the smallest shift each severity raises at the job's own noise),
    read 240 s into the recording, against a +10% change injected there: on the H200 2-GPU job
    whose speed wandered it reads above 10% and the change is not raised critical within 60 s;
    on the steady 148 ms job it reads under 10% and the change is. All recordings:
    bench/results/detection_reach_real.md (20 of 23 foretold)."""
    series = lines(name)
    at = first_step_time(series) + 240
    reach = reach_at(series, at)
    assert reach, "not armed at 240 s"
    critical = [r["critical"] for r in reach.values()]
    alerts = replay(events(inject(series, "step", 0.10, at, 0)), DetectionConfig())
    raised = [t - at for a in alerts if a.alertname == "StepwatchThroughputDrift" and a.starts_at >= at - 30
              for t, sev in a.history if sev == "critical"]
    if blind:
        assert min(critical) > 0.10 and not [t for t in raised if t <= 60], (critical, raised)
    else:
        assert max(critical) <= 0.10 and [t for t in raised if t <= 60], (critical, raised)


def _pulses(series, where_each, ratio=0.10, on_s=90.0, off_s=140.0, at_s=240.0):
    """``series`` with a +``ratio`` pulse per entry of ``where_each`` (what its time is made of:
    a phase, "loader", or None), on ``on_s`` and off ``off_s`` of the recording's time from
    ``at_s``; returns the changed series and each pulse's (start, end)."""
    return pulses(series, where_each, first_step_time(series) + at_s, ratio, on_s, off_s)


def _raised_per_pulse(alerts, spans):
    """Per pulse, the drift episodes whose onset lies in it (30 s of slack before its start)."""
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    out = []
    for k, (start, end) in enumerate(spans):
        nxt = spans[k + 1][0] if k + 1 < len(spans) else float("inf")
        out.append([a for a in drift if start - 30 <= a.starts_at < nxt - 30])
    return out


def _each_its_own_jobs_episode(changed, spans, where) -> list:
    """``changed`` (a series with pulses at ``spans``, made of ``where``) replayed at the defaults:
    asserts that each pulse is raised within 60 s in one episode of its own, decided as a change
    of the job, resolved within 2 minutes of its end; returns (where, that episode) per pulse."""
    per = _raised_per_pulse(replay(events(changed), DetectionConfig()), spans)
    out = []
    for w, (start, end), eps in zip(where, spans, per):
        assert len(eps) == 1, (w, [(a.starts_at - start, a.fired_summary) for a in eps])
        (a,) = eps
        assert a.fired_at - start <= 60 and a.decided == "job", (w, a.fired_at - start, a.fired_summary)
        assert a.ends_at is not None and a.ends_at - end <= 120, (w, a.ends_at - end)
        out.append((w, a))
    return out


def test_real_changes_that_come_back_with_their_evidence_are_each_raised(lines):
    """Four +10% changes on a held-out real H200 job, each 90 s on and 140 s off, each made of a
    different part of the step (backward, the data-loader wait, forward, optimizer), as real
    causes are: each raised within 60 s in an episode of its own, decided as a change of the job
    with that part as its evidence, and resolved within 2 minutes of its end. The same four
    changes with nothing but the step time moving (the host's own pace) need more: none is taken
    for the job's, the first is raised later than a minute (its full ratio over two critical
    windows: 85 s; 34 s with its evidence), and the later ones are not all raised within 60 s."""
    series = repeat(lines("h200x_1gpu_m.jsonl.gz"), 3, match=True)  # (room for four: 20 minutes)
    where = ["backward", "loader", "forward", "optimizer"]
    changed, spans = _pulses(series, where)
    for w, a in _each_its_own_jobs_episode(changed, spans, where):
        assert a.evidence["name"] == {"loader": "data-loader wait"}.get(w, w), a.evidence
    bare, spans = _pulses(series, [None] * 4)
    per = _raised_per_pulse(replay(events(bare), DetectionConfig()), spans)
    assert per[0] and per[0][0].fired_at - spans[0][0] > 60, [(a.fired_at - spans[0][0]) for a in per[0]]
    assert all(a.decided == "steps" for eps in per for a in eps), [a.decided for eps in per for a in eps]
    late = [not eps or min(a.fired_at for a in eps) - s > 60 for eps, (s, _) in zip(per[1:], spans[1:])]
    assert any(late), [(a.starts_at - s, a.fired_summary) for eps, (s, _) in zip(per, spans) for a in eps]


def test_a_change_whose_evidence_went_away_resolves_though_the_host_stays_up(lines):
    """The same four pulses on a held-out 2 x H200 job whose host wanders by a few percent: the
    loader's episode ends within 2 minutes of the loader's end once its wait is back and the
    step stands under the shift raised, though the step stays a little above the level it was
    compared against (the host's); so the forward pulse after it is raised within 60 s in an
    episode of its own. (When the step had to fall under half the shift, the loader's episode
    stayed open 308 s after its end and the forward came 79 s late as a further change of it:
    bench/results/evidence_pulses_gone_step.md.)"""
    series = repeat(lines("h200zb_2gpu_m.jsonl.gz"), 3, match=True)
    where = ["backward", "loader", "forward", "optimizer"]
    changed, spans = _pulses(series, where)
    per = _raised_per_pulse(replay(events(changed), DetectionConfig()), spans)
    loader, forward = per[1], per[2]
    assert loader and all(a.ends_at is not None and a.ends_at - spans[1][1] <= 120 for a in loader), \
        [(a.ends_at and a.ends_at - spans[1][1], a.fired_summary) for a in loader]
    assert forward and all(a.starts_at >= spans[2][0] - 30 and a.fired_at - spans[2][0] <= 60 and a.decided == "job"
                           for a in forward), [(a.fired_at - spans[2][0], a.fired_summary) for a in forward]


def test_a_phase_change_dated_at_a_scheduled_window_is_the_jobs_drift_not_the_agents_cost(lines):
    """The four pulses on a held-out 2 x H200 job with scheduled profiler windows: rank 0's
    optimizer pulse (its device time +4.5 ms/step) begins 20 s after one of the windows ended, and
    the step times date it at that window's end, where the 10 steps after the window stood above
    the 10 before it (the host wandering). Its evidence is one phase's device time, which no
    window makes (the real after-effect, tests/data/real/diag/h200z_1gpu_s_window_aftereffect,
    was the host slower in every phase): raised as the job's drift, dated at the optimizer's own
    change, within 60 s, never as StepwatchProfilerOverhead (it was, 32 s after the pulse's
    start)."""
    base = lines("h200t_2gpu_m_sched_short.jsonl.gz")
    span = max(float(o["time"]) for o in base) - first_step_time(base)
    series = repeat(base, int(1220 // (span - 180)) + 1, match=True)  # (as bench/evidence_pulses.py)
    changed, spans = _pulses(series, ["backward", "loader", "forward", "optimizer"])
    start, end = spans[3]
    mine = [a for a in replay(events(changed), DetectionConfig()) if a.rank == 0 and start - 30 <= a.onset < end]
    assert mine and {a.alertname for a in mine} == {"StepwatchThroughputDrift"}, \
        [(a.alertname, a.onset - start, a.fired_summary) for a in mine]
    first = min(mine, key=lambda a: a.fired_at)
    assert first.fired_at - start <= 60 and abs(first.onset - start) <= 10, (first.fired_at - start, first.onset - start)
    assert "a change of the job: optimizer +" in first.fired_summary, first.fired_summary


def test_no_episode_of_a_rank_opens_with_an_onset_inside_the_one_before(lines):
    """The held-out 2 x H200 job h200t with the agent's scheduled profiler windows (their
    after-effects raise evidence-less episodes on it), played nine times: once a rank's episode
    ends, on whichever of its two detectors (medians, floors) held it, neither reaches back
    before that end, so no later episode of the rank is dated inside it. Before, the detector
    that had not held it read windows over it: rank 0's medians raised a warning dated 269.5 s,
    inside the floors' episode of 254-400 s (fired at 485 s), and an info episode fired 235 s
    after an onset dated inside the episode before it."""
    series = repeat(lines("h200t_2gpu_m_sched_short.jsonl.gz"), 9, match=True)
    drift = [a for a in replay(events(series), DetectionConfig()) if a.alertname == "StepwatchThroughputDrift"]
    assert len({a.rank for a in drift}) == 2, [(a.rank, a.summary) for a in drift]
    t0, b = first_step_time(series), DriftConfig().bucket_s
    for rank in (0, 1):
        eps = sorted((a for a in drift if a.rank == rank), key=lambda a: a.starts_at)
        for before, after in zip(eps, eps[1:]):  # (an onset is a bucket's start; an end, its last step)
            assert before.ends_at is not None and after.starts_at >= before.ends_at - b, \
                (rank, before.starts_at - t0, before.ends_at - t0, after.starts_at - t0, after.summary)


def test_an_alerts_text_dates_the_change_at_the_alerts_own_step(lines):
    """The pair of detectors dated the backward pulse on this 2-GPU job 100 steps apart (under a
    critical window): the alert keeps the first onset, and its text, made by the detector shown
    later, says that same step, never "since step 5,190" beside the alert's step 5,090."""
    changed, _ = _pulses(lines("h200x_2gpu_m.jsonl.gz"), ["backward", "loader", "optimizer", None])
    drift = [a for a in replay(events(changed), DetectionConfig()) if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) >= 4, [(a.rank, a.step, a.summary) for a in drift]
    assert all(f" since step {a.step:,}" in a.summary for a in drift if not a.earlier), [
        (a.rank, a.step, a.summary) for a in drift]


def test_changes_with_their_evidence_inside_a_host_episode_are_raised_as_its_further_changes(lines):
    """The four pulses on a held-out launch-bound H200 job played three times. Its real host
    change (+14%, nothing holds it) comes back after a seam and opens an episode 50 s before the
    optimizer pulse (+10%, its device time ~20 of its own spreads out). The host's level receded
    below the level raised, so the pulse stands under half that shift above it; against the
    episode's own level just before it, it is a warning's shift that the optimizer holds. That
    level was read only once the episode held 6 buckets (30 s) before the window, so the pulse
    was never raised (folded silently); now 3 buckets do: it is raised as the episode's further
    change with the optimizer as its evidence, ~61 s after it began
    (bench/results/further_inside_min.md). Earlier, the loader pulse (its wait 0.13 -> 1.2 ms)
    came inside an episode of the host's +10% as the host came back: the step stood where it
    was, and the loader's change was never shown; it is now the episode's further change, its
    evidence the loader's wait, raised within 60 s (ShiftTests.further_by_cause)."""
    series = repeat(lines("h200u_1gpu_xs.jsonl.gz"), 3, match=True)
    changed, spans = _pulses(series, ["backward", "loader", "forward", "optimizer"])
    drift = [a for a in replay(events(changed), DetectionConfig()) if a.alertname == "StepwatchThroughputDrift"]
    raised = []  # (onset, raised, text) of every onset raised: each episode's first, then each further change
    for a in drift:  # (``earlier``'s times are the API's texts)
        onsets = [(unix(e["onset_at"]), e["raised"]) for e in a.earlier] + [(a.onset, a.onset_raised[1])]
        times = [a.fired_at] + [unix(e["until"]) for e in a.earlier]
        raised += [(on, t, text) for (on, text), t in zip(onsets, times) if t]
    for k, within, source in ((1, 60, "data-loader wait +"), (3, 75, "optimizer +")):
        start, end = spans[k]
        mine = [(on - start, t - start, text) for on, t, text in raised if start - 30 <= on <= end and t >= start]
        assert mine and min(t for _, t, _ in mine) <= within, (k, mine)
        first = min(mine, key=lambda m: m[1])
        assert "(a further change: the episode began at step" in first[2] and f"a change of the job: {source}" in first[2], first


@pytest.mark.parametrize("ratio,times", [(0.05, 1), (0.10, 3)])
def test_work_added_on_a_launch_bound_device_as_its_host_rose_is_one_episode_while_it_lasts(ratio, times, lines):
    """The held-out launch-bound h200zw, backward's device time +5% of the step from 240 s to its
    end, its host's pace up 22 s before that: the change is raised (dated at the host's rise,
    read as the device's work over every phase, which the host's pace moved with it) and stays
    one episode to the end. The device work's time fell back as the host dipped 23 s after the
    change while backward's device time beyond its host time stayed grown; read on the device
    time alone, the episode ended then and the change was raised again 60 s in
    (RankEvidence.grown). The same +10% on the recording played three times: backward, a part of
    the device's work the episode holds, is no change of cause inside it (taken for one, the
    episode was split in three, ShiftTests.further_by_cause)."""
    series = repeat(lines("h200zw_1gpu_s.jsonl.gz"), times, match=True) if times > 1 else lines("h200zw_1gpu_s.jsonl.gz")
    at = first_step_time(series) + 240
    alerts = replay(events(inject(series, "step", ratio, at, 0, "backward")), DetectionConfig())
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift" and a.fired_at >= at - 30]
    assert len(drift) == 1, [(a.fired_at - at, a.ends_at and a.ends_at - at, a.fired_summary) for a in drift]
    (a,) = drift
    assert a.fired_at - at <= 60 and a.decided == "job" and a.ends_at is None, (a.fired_at - at, a.decided, a.ends_at)


def test_changes_on_the_device_of_a_launch_bound_job_are_raised_on_its_device_time_beyond_the_host(lines):
    """The held-out launch-bound h200zw (one H200, 11.4 ms steps: each phase's device time is its
    host time, and wanders with the host's pace 8-9% between adjacent 10-s blocks), played five
    times with four +10% pulses (backward, the loader's wait, forward, optimizer; the injected
    phase's device time grows, its host time does not): each raised within 60 s in an episode
    of its own, decided as a change of the job, and resolved within 2 minutes of its end. Read
    in its device time's spreads alone, backward was raised after 63.5 s and forward never; its
    device time beyond its host time stood near nothing before them (RankEvidence.spreads)."""
    series = repeat(lines("h200zw_1gpu_s.jsonl.gz"), 5, match=True)
    where = ["backward", "loader", "forward", "optimizer"]
    changed, spans = _pulses(series, where)
    assert len(_each_its_own_jobs_episode(changed, spans, where)) == len(where)
