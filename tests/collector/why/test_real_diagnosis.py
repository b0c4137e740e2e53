"""Real 1-GPU jobs on an H100 with one injected cause each (tests/data/real/diag, README beside
them), replayed at the default detection settings: each slowdown is raised once, as throughput
drift, within a minute of the change, and its diagnosis names the cause first."""

from __future__ import annotations

import pathlib
from typing import Optional

import pytest

from stepwatch.collector._replay import replay
from stepwatch.collector.alerting._book import unix
from stepwatch.collector.detect import DetectionConfig, DriftConfig, parse_detection
from stepwatch.collector.tools.corpus import events, load

DIAG = pathlib.Path(__file__).resolve().parents[2] / "data" / "real" / "diag"


def _alerts(name: str) -> list:
    return replay(events(load(str(DIAG / f"h100g_1gpu_m_{name}.jsonl.gz"))), DetectionConfig())


@pytest.mark.parametrize("name, changed, first", [
    ("dataloader", 1795753116.74, "data +"),
    ("empty_cache", 1795753116.77, "allocator churn: cudaMalloc/cudaFree 0.0 -> "),
    ("gemm_forward", 1795753116.77, "forward +"),
])
def test_the_cause_is_named_first(name, changed, first):
    alerts = _alerts(name)
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) == 1, [(a.alertname, a.fired_summary) for a in alerts]
    assert 0 < drift[0].fired_at - changed <= 60, drift[0].fired_at - changed
    assert drift[0].diagnosis.startswith(first), drift[0].diagnosis


def test_a_slower_data_loader_whose_waits_alternate_is_named_with_its_wait():
    """Two workers slower than the step make every other step wait ~20 ms and the next ~0.1
    ms: the median wait barely moved (+1.3 ms), the time per step did (+4.7 ms)."""
    d = [a for a in _alerts("dataloader") if a.alertname == "StepwatchThroughputDrift"][0]
    assert "data-loader wait +4." in d.diagnosis.split(";")[0], d.diagnosis


def test_a_change_two_steps_before_a_window_ends_is_the_jobs_own_drift_never_the_profilers_cost():
    """The step time rose as a profiler window closed (+10.8% in its first 30 s, +17% in 45 s).
    Raised on the critical window alone it was first taken for the profiler's cost and then
    turned into drift once the allocator churn was seen; a critical shift under +15% now has to
    stand 45 s, by which time the churn is in the diagnosis: one drift episode, firing, with the
    churn first, never an overhead alert (the overhead-to-drift path itself: the CPU test
    test_an_overhead_episode_the_diagnosis_finds_to_be_the_jobs_own_becomes_drift)."""
    alerts = _alerts("empty_cache")
    assert [(a.alertname, a.state) for a in alerts] == [("StepwatchThroughputDrift", "firing")], \
        [(a.alertname, a.state, a.fired_summary) for a in alerts]
    assert alerts[0].diagnosis.startswith("allocator churn: cudaMalloc/cudaFree"), alerts[0].diagnosis
    assert 4_095 <= alerts[0].step <= 4_095 + 100, alerts[0].step


def test_launch_bound_tiny_operators_are_named_as_forward_on_the_host():
    alerts = _alerts("small_ops_cut")
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) == 1, [(a.alertname, a.fired_summary) for a in alerts]
    assert drift[0].diagnosis.startswith("forward +") and "(host-bound: its host time +" in drift[0].diagnosis, \
        drift[0].diagnosis


def _h100h(name: str) -> list:
    return replay(events(load(str(DIAG / f"h100h_1gpu_m_{name}.jsonl.gz"))), DetectionConfig())


def test_an_optimizer_that_lost_its_fused_kernels_is_named_first():
    drift = [a for a in _h100h("optimizer_loop") if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) == 1 and 0 < drift[0].fired_at - 1795764036.24 <= 60, drift
    assert drift[0].diagnosis.startswith("optimizer +"), drift[0].diagnosis


@pytest.mark.parametrize("name, changed", [("d2h", 1795764036.27), ("sync", 1795764034.92),
                                           ("gemm_backward", 1795764035.98)])
def test_nothing_is_raised_before_the_change(name, changed):
    """(+5% changes with 90 s after them raise nothing yet; the GEMMs in backward are raised
    45 s after, named in tests/collector/why/test_diagnosis.py)"""
    assert all(a.fired_at > changed for a in _h100h(name)), [(a.alertname, a.fired_at - changed) for a in _h100h(name)]


def test_gemms_in_backward_show_in_backward_on_the_phase_clock():
    """The phase timer's backward point at the `Tensor.backward` call: the GEMMs' time lands in
    backward (the sampled steps' means, 120 s before against after the change)."""
    import statistics
    rows = [p for ev in events(load(str(DIAG / "h100h_1gpu_m_gemm_backward.jsonl.gz"))) if ev.kind == "batch"
            for p in ev.batch.phase_times]
    t = 1795764035.98
    before = statistics.mean(p.backward_s for p in rows if t - 120 <= p.end_time_s < t)
    after = statistics.mean(p.backward_s for p in rows if p.end_time_s >= t + 5)
    fwd = [statistics.mean(p.forward_s for p in rows if t - 120 <= p.end_time_s < t),
           statistics.mean(p.forward_s for p in rows if p.end_time_s >= t + 5)]
    assert after - before > 0.004 and abs(fwd[1] - fwd[0]) < 0.001, (before, after, fwd)


# h200e: the same job on one NVIDIA H200 each (4 side by side), 2026-11-27, causes from 190 s
# on, at least 130 s after them (tests/data/real/diag/README.md)
H200E = {"d2h": (1795775437.34, "sync +"), "gemm_backward": (1795775437.51, "backward +"),
         "small_ops": (1795775437.58, "forward +"), "gemm_forward": (1795775861.07, "forward +"),
         "empty_cache": (1795775861.20, "allocator churn: "), "dataloader": (1795775862.16, "data +"),
         "optimizer_loop": (1795775861.15, "optimizer +"), "sync": (1795775437.34, "sync +")}


def _h200e(name: str) -> list:
    gpus = "2gpu" if name == "allreduce" else "1gpu"
    return replay(events(load(str(DIAG / f"h200e_{gpus}_m_{name}.jsonl.gz"))), DetectionConfig())


@pytest.mark.parametrize("name", sorted(H200E))
def test_h200_causes_are_raised_once_after_the_change_and_named_first(name):
    """9 of 9 named first (the allreduce below). The synchronize (+2-4%, on a host wandering as
    much) is dated 76 s late, where the wander added to it, and raised against the job's settled
    level: its diagnosis compares with the times of that level, which the blocks just ahead of
    the onset (already holding the change) would not explain."""
    changed, first = H200E[name]
    alerts = _h200e(name)
    assert len(alerts) == 1 and alerts[0].alertname == "StepwatchThroughputDrift", \
        [(a.alertname, a.fired_at - changed) for a in alerts]
    assert 0 < alerts[0].fired_at - changed <= 180, alerts[0].fired_at - changed
    assert alerts[0].diagnosis.startswith(first), alerts[0].diagnosis


def test_a_host_sync_before_the_optimizer_is_named_as_the_hosts_wait():
    """A device-to-host copy after backward: the host blocks there and launches the optimizer
    onto an idle device; named as that wait, not as the copy's own host time (host-bound)."""
    d = _h200e("d2h")[0].diagnosis
    assert d.startswith("sync +") and "the host now waits for the device before the optimizer step" in d, d
    assert "host-bound" not in d.split(";")[0], d


def test_an_extra_all_reduce_on_every_rank_is_named_as_the_sync_phase():
    alerts = _h200e("allreduce")
    assert alerts and all(a.alertname == "StepwatchThroughputDrift" and a.fired_at > 1795776205.74 for a in alerts), \
        [(a.alertname, a.fired_at) for a in alerts]
    assert alerts[0].diagnosis.startswith("sync +") and "all-reduce wait" in alerts[0].diagnosis, alerts[0].diagnosis


def test_an_extra_all_reduce_recorded_live_at_the_defaults_is_named_on_both_ranks_within_a_minute():
    """2 x H200, 2026-11-29 (bench/results/real_h200t.md): an ~8 ms all-reduce on both ranks from
    step 3,903; live, both ranks raised critical 18-19 s after it, the sync phase first."""
    changed = 1795984895.07
    alerts = replay(events(load(str(DIAG / "h200t_2gpu_m_allreduce.jsonl.gz"))), DetectionConfig())
    assert sorted(a.rank for a in alerts) == [0, 1], [(a.alertname, a.rank, a.fired_at - changed) for a in alerts]
    for a in alerts:
        assert a.alertname == "StepwatchThroughputDrift" and 0 < a.fired_at - changed <= 60, \
            (a.alertname, a.fired_at - changed)
        assert a.diagnosis.startswith("sync +") and "all-reduce wait" in a.diagnosis, a.diagnosis


def test_a_real_window_after_effect_is_raised_as_the_profilers_cost_not_the_jobs():
    """A launch-bound H200 job ran ~20% slower after a scheduled profiler window closed at step
    16,389 (nothing injected): the collector names the window and stepwatch, and raises no
    throughput drift against the job."""
    alerts = replay(events(load(str(DIAG / "h200z_1gpu_s_window_aftereffect.jsonl.gz"))), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchProfilerOverhead"], \
        [(a.alertname, a.fired_summary) for a in alerts]
    summary = alerts[0].fired_summary
    assert "window ending at step 16,389" in summary and "stepwatch's own cost" in summary, summary
    assert 16_389 < alerts[0].step <= 16_389 + 50, alerts[0].step
    assert alerts[0].severity == "critical", alerts[0].severity


H200W = DIAG.parents[1] / "replay" / "h200w_diagnosis_gpu.jsonl.gz"
# tests/gpu/test_diagnosis_gpu.py's recording on an H200 (2026-11-29, bench/results/real_h200w):
# three ~11-13 ms jobs, each 6 ms/step slower from step 1,000, detection on horizons of seconds:
# that test's settings when it was recorded (a copy: it stays as it is if that test's settings change)
GPU_TEST_DETECTION = {"warmup_steps": 10, "resolve_hold_s": 600, "trace_steps": 0,
                      "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 6,
                                "critical_window_s": 2, "warning_window_s": 3, "info_window_s": 6,
                                "clear_s": 1, "z": 3}}


def test_an_h200_change_near_the_pause_limit_is_dated_at_its_step():
    """The optimizer job's +5 ms (11.0 -> 15.9 ms, +44%: steps of 1.3-1.8x the level, around the
    pause limit) was dated at step 1,082 live, its first 81 steps dropped as a "pause"; each
    of the three changes is dated within 60 steps of step 1,000 and named first."""
    alerts = replay(events(load(str(H200W))), parse_detection(GPU_TEST_DETECTION))
    drift = {a.job: a for a in alerts if a.alertname == "StepwatchThroughputDrift"}
    assert sorted(drift) == ["gpu-backward", "gpu-dataloader", "gpu-optimizer"], sorted(drift)
    for job, first in (("gpu-backward", "backward +"), ("gpu-dataloader", "data +"),
                       ("gpu-optimizer", "optimizer +")):
        assert abs(drift[job].step - 1000) <= 60, (job, drift[job].step)
        assert drift[job].diagnosis.startswith(first), (job, drift[job].diagnosis)


# h200u: held out (recorded after the mends above), one H200, 2026-11-29 (tests/data/real/diag/README.md)
H200U_OPTIMIZER_AT = 1795965203.22


def test_a_held_out_for_loop_optimizer_is_named_first_at_its_onset():
    """Live and replayed: one drift episode, its onset within 30 s after the change, the
    optimizer phase named first (not the host CPU that the for-loop's launches cost)."""
    alerts = replay(events(load(str(DIAG / "h200u_1gpu_m_optimizer_loop.jsonl.gz"))), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"], [(a.alertname, a.fired_summary) for a in alerts]
    assert 0 <= alerts[0].starts_at - H200U_OPTIMIZER_AT <= 30, alerts[0].starts_at - H200U_OPTIMIZER_AT
    assert alerts[0].diagnosis.startswith("optimizer +"), alerts[0].diagnosis


def test_a_synchronize_that_barely_slows_a_launch_bound_job_raises_nothing():
    """+1.3% next to the change on a host wandering 11.5-15.5 ms (20 s medians): below what
    drift raises, and nothing before the change either."""
    alerts = replay(events(load(str(DIAG / "h200u_1gpu_s_sync.jsonl.gz"))), DetectionConfig())
    assert alerts == [], [(a.alertname, a.fired_summary) for a in alerts]


# h200q: held out (recorded after every mend), two H200s side by side, 2026-11-30 (diag README)
H200Q_AT = {"h200q_1gpu_m_optimizer_loop.jsonl.gz": 1796006845.81, "h200q_1gpu_m_sync.jsonl.gz": 1796006845.90}


def test_a_second_held_out_for_loop_optimizer_is_named_first_within_a_minute_of_its_growth():
    """Live and replayed: one drift episode, the optimizer phase named first (the for-loop's
    launches cost host time: the host CPU is not named first), decided by the optimizer's time.
    Its step grew in over half a minute (40.2-41.1 -> 43.3-46.2 ms): at +9.7% with nothing yet
    holding it, it is short of what such a shift needs, and it is raised once the optimizer
    holds it, dated where the optimizer's time changed (21.6 s after the change; 1.4 s when the
    step times alone raised it)."""
    name = "h200q_1gpu_m_optimizer_loop.jsonl.gz"
    alerts = replay(events(load(str(DIAG / name))), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"], [(a.alertname, a.fired_summary) for a in alerts]
    assert 0 <= alerts[0].starts_at - H200Q_AT[name] <= 30, alerts[0].starts_at - H200Q_AT[name]
    assert alerts[0].decided == "job" and alerts[0].evidence["name"] == "optimizer", alerts[0].evidence
    assert alerts[0].diagnosis.startswith("optimizer +"), alerts[0].diagnosis


def test_a_synchronize_of_five_percent_is_raised_by_its_evidence_and_nothing_before_the_change():
    """+4-6% for the 130 s the job ran after the change: under what a 90 s warning window tells
    from this job's step noise (its reach at the end +6.4%), so the step times alone raise
    nothing; the optimizer's device time, where the synchronize waits, grew +1.4 ms, many of its
    own spreads out: raised as the job's change, its onset at the change. Nothing before it."""
    name = "h200q_1gpu_m_sync.jsonl.gz"
    lines = load(str(DIAG / name))
    at = H200Q_AT[name]
    assert replay(events(lines), DetectionConfig(drift=DriftConfig(evidence=False))) == []
    alerts = replay(events(lines), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"], \
        [(a.alertname, a.starts_at - at, a.fired_summary) for a in alerts]
    (a,) = alerts
    assert a.decided == "job" and a.evidence["name"] == "optimizer" and 0 <= a.starts_at - at <= 10 \
        and a.fired_at > at, (a.starts_at - at, a.fired_at - at, a.evidence)


# h200ze: held out (recorded at ea81020, after every mend), 2 x H200, 2026-11-30, batch fixed at 8,
# causes from 210 s; the change's time from each job's own step clock (diag README)
H200ZE = {"d2h": (1796049604.59, "sync +"), "optimizer_loop": (1796050023.94, "optimizer +"),
          "small_ops": (1796050024.38, "forward +")}


def _h200ze(name: str) -> list:
    gpus = "2gpu" if name == "allreduce" else "1gpu"
    return replay(events(load(str(DIAG / f"h200ze_{gpus}_m_{name}.jsonl.gz"))), DetectionConfig())


@pytest.mark.parametrize("name", sorted(H200ZE))
def test_held_out_h200_causes_are_raised_within_a_minute_onset_near_the_change_named_first(name):
    """One drift episode each, raised 23-48 s after the change, its onset within 10 s of it (the
    for-loop optimizer's 8 s before: the 5 s buckets), the cause's phase first - live at the
    defaults as replayed."""
    changed, first = H200ZE[name]
    alerts = _h200ze(name)
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"], \
        [(a.alertname, a.fired_at - changed) for a in alerts]
    a = alerts[0]
    assert 0 < a.fired_at - changed <= 60 and abs(a.starts_at - changed) <= 30, \
        (a.fired_at - changed, a.starts_at - changed)
    assert a.diagnosis.startswith(first), a.diagnosis


def test_a_held_out_extra_all_reduce_is_named_as_sync_on_both_ranks():
    """Both ranks critical (rank 1 39 s after the change, rank 0 96 s: its warning waited on the
    critical sustain), onsets 4 s after it, the sync phase first on both."""
    changed = 1796050397.84
    alerts = _h200ze("allreduce")
    assert sorted(a.rank for a in alerts) == [0, 1], [(a.alertname, a.rank) for a in alerts]
    for a in alerts:
        assert a.alertname == "StepwatchThroughputDrift" and 0 < a.fired_at - changed <= 120, \
            (a.rank, a.fired_at - changed)
        assert 0 <= a.starts_at - changed <= 30, a.starts_at - changed
        assert a.diagnosis.startswith("sync +") and "all-reduce wait" in a.diagnosis, a.diagnosis


def test_a_synchronize_that_costs_one_percent_is_not_raised_nor_the_later_host_wave():
    """The synchronize cost this GPU-bound job +0.9% (40.7 -> 41.1 ms): nothing raised for it.
    ~115 s later the host slowed ~+6% for a minute, on this job and on the d2h job beside it at
    the same time, nothing the agent measures holding it: judged on the step times alone it is
    raised critical (+8.4%), at the defaults not (a shift that nothing holds needs its full
    ratio over two windows: bench/results/detection_unbacked_more.md)."""
    changed = 1796049606.42
    lines = load(str(DIAG / "h200ze_1gpu_m_sync.jsonl.gz"))
    alone = replay(events(lines), DetectionConfig(drift=DriftConfig(evidence=False)))
    assert [a.alertname for a in alone] == ["StepwatchThroughputDrift"] and alone[0].starts_at - changed > 100, \
        [(a.alertname, a.starts_at - changed) for a in alone]
    assert _h200ze("sync") == [], [(a.alertname, a.rank, a.fired_summary) for a in _h200ze("sync")]


# h200zg (README): one 18.7-minute H200 job at the defaults, four real causes in turn from 200 s
# after its first step, each on 90 s and off 140 s (Unix start, end of each, from its step clock)
H200ZG = [("gemm_backward", 1796186781.34, 1796186871.35), ("dataloader", 1796187011.33, 1796187101.37),
          ("empty_cache", 1796187241.37, 1796187331.34), ("optimizer_loop", 1796187471.35, 1796187561.33)]


def _causes_in_turn(lines: list, causes: list, expected: tuple) -> list:
    """Drift episodes of a live four-cause job replayed at the defaults: nothing raised while
    healthy; each ``expected`` (cause, within s, evidence's name or None for any, the why's
    start) raised within its time of its start in an episode of its own, decided by its
    evidence, named first in the
    why, and resolved within 2 minutes of its end. Returns the alerts."""
    alerts = [a for a in replay(events(lines), DetectionConfig()) if a.alertname == "StepwatchThroughputDrift"]
    assert all(a.starts_at >= causes[0][1] - 30 for a in alerts), [a.fired_summary for a in alerts]
    when = {c: (start, end) for c, start, end in causes}
    for cause, within, evidence, first in expected:
        start, end = when[cause]
        mine = [a for a in alerts if start - 30 <= a.starts_at < end]
        assert len(mine) == 1, (cause, [a.fired_summary for a in mine])
        (a,) = mine
        assert a.fired_at - start <= within and a.decided == "job" and evidence in (None, a.evidence["name"]), \
            (cause, a.fired_at - start, a.fired_summary)
        assert a.diagnosis.startswith(first), a.diagnosis
        assert a.ends_at is not None and a.ends_at - end <= 120, (cause, a.ends_at - end)
    return alerts


def test_live_causes_in_turn_are_raised_each_in_its_own_episode_by_their_evidence():
    """h200zg replayed: the allocator churn and the for-loop optimizer within 30 s (allocator
    calls; the optimizer's device time, named before host CPU), the slower loader within 60 s by
    its wait, 32 of its own spreads out where the step stood under ``z`` of its own. With the
    step times alone (``drift.evidence`` off) the optimizer, no larger than the churn's episode
    that had ended by itself, is held back as a wave: never raised. (The +10% GEMMs spread over
    the phases with their host time: no source holds them; the device's work stood 2.2 of its
    own spreads out: bench/results/real_h200zg.md, real_h200zi.md.)"""
    lines = load(str(DIAG / "h200zg_1gpu_m_pulses.jsonl.gz"))
    _causes_in_turn(lines, H200ZG, (("dataloader", 60, "data-loader wait", "data +"),
                                    ("empty_cache", 30, "allocator calls", "allocator churn"),
                                    ("optimizer_loop", 30, "optimizer", "optimizer +")))
    steps_alone = replay(events(lines), parse_detection('{"drift": {"evidence": false}}'))
    start, end = H200ZG[3][1:]
    assert not [a for a in steps_alone if start - 30 <= a.starts_at < end], "the wave rule no longer holds it"


# h200zi (diag README, held out): the same four causes on another H200 lease, live at 43d2858
H200ZI = [("gemm_backward", 1796233187.25, 1796233277.25), ("dataloader", 1796233417.23, 1796233507.23),
          ("empty_cache", 1796233647.25, 1796233737.23), ("optimizer_loop", 1796233877.23, 1796233967.23)]


def test_four_live_causes_each_raised_by_its_evidence_with_its_cause_named_first():
    """Live at the defaults and replayed alike: the GEMMs (+6%) by the backward's device time in
    63 s, the loader (+12%) by its wait in 45 s, the churn in 18 s, the for-loop optimizer (+9%)
    by its device time in 26 s, each its own episode, resolved 65-72 s after its end; nothing
    while healthy. (The churn's evidence at the raise was the device's work, +8.7 ms; its why
    names the allocator churn first.)"""
    lines = load(str(DIAG / "h200zi_1gpu_m_pulses.jsonl.gz"))
    _causes_in_turn(lines, H200ZI, (("gemm_backward", 70, "backward", "backward +"),
                                    ("dataloader", 60, "data-loader wait", "data +"),
                                    ("empty_cache", 30, None, "allocator churn"),
                                    ("optimizer_loop", 30, "optimizer", "optimizer +")))


# h200zj (diag README, held out): a launch-bound job (size s) whose host sped up by 40% in its
# first five minutes; the recording ends 63 s into its second cause (its collector was killed)
H200ZJ = [("gemm_backward", 1796266992.56, 1796267082.56), ("dataloader", 1796267222.56, 1796267312.56)]


def test_launch_bound_live_job_raises_its_slower_loader_by_its_wait_and_nothing_while_its_host_wanders():
    """Live at the defaults and replayed alike: the slower loader (+20% of a 6.6 ms step) raised
    55 s after its start, decided by the loader's wait; nothing in the 430 s before it: the
    host's speed-up from 11-12 to 6.6 ms per step, and the backward's GEMMs (0.8 ms of device
    work, mostly hidden under the launches: the step's level moved with the host, not with
    them)."""
    lines = load(str(DIAG / "h200zj_1gpu_s_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"], [a.fired_summary for a in alerts]
    (a,) = alerts
    start = H200ZJ[1][1]
    assert a.starts_at >= start - 30 and a.fired_at - start <= 60, (a.starts_at - start, a.fired_at - start)
    assert a.decided == "job" and a.evidence["name"] == "data-loader wait", (a.decided, a.evidence)
    assert a.diagnosis.startswith("data +"), a.diagnosis


# h200zk (diag README, held out): a launch-bound job (size s); the recording ends 94 s after its
# first cause (the machine was given back between two device calls)
H200ZK = [("small_ops", 1796277955.75, 1796278045.75)]


def test_launch_bound_tiny_ops_on_a_host_that_slowed_with_them_are_raised_with_forward_named_first():
    """143 tiny ops in forward (its host time +1.1 ms, +12% of a 9.4 ms step), and from 20 s in
    the host slowed every phase as well (the step +31%): one episode, its onset at the cause's
    start, raised at warning 60 s after it, decided by the forward's time (3.7 -> 5.4 ms, its
    host time with it: +46% of its own time against the step's +6.5%, more than a slower host
    makes it), its why naming forward first; resolved within 75 s of the cause's end; nothing in
    the healthy 300 s, whose host wandered +-25% on its own. Live, and replayed before a
    host-paced phase was read so, it was raised 80 s after, decided by the step times
    (bench/results/real_h200zk.md)."""
    lines = load(str(DIAG / "h200zk_1gpu_s_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"], [a.fired_summary for a in alerts]
    (a,) = alerts
    _, start, end = H200ZK[0]
    assert -5 <= a.starts_at - start <= 20 and a.fired_at - start <= 60, (a.starts_at - start, a.fired_at - start)
    assert a.severity == "warning" and a.decided == "job", (a.severity, a.decided)
    assert "a change of the job: forward +" in a.fired_summary, a.fired_summary
    assert a.diagnosis.startswith("forward +"), a.diagnosis
    assert a.ends_at is not None and a.ends_at - end <= 75, a.ends_at


# h200zl (diag README, held out): the GEMMs made +10% of the step by their own ratio, then the
# slower loader; the recording ends 105 s after the loader's start (one device call of 500 s)
H200ZL = [("gemm_backward", 1796288105.16, 1796288195.15), ("dataloader", 1796288305.16, 1796288395.17)]


def test_gemms_in_backward_at_their_full_share_are_raised_within_a_minute_by_the_backward():
    """Live at the defaults and replayed alike: the GEMMs' 7.4 ms asked for gave the backward
    +3.5 ms of device time (the step 43.5 -> 46.9 ms, +8%): raised 50 s after their start by
    the backward's device time, named first, resolved 81 s after their end; the slower loader
    (the step +18%) raised by its wait 34 s after its start; nothing while healthy."""
    lines = load(str(DIAG / "h200zl_1gpu_m_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"] * 2, [a.fired_summary for a in alerts]
    for a, (cause, start, end), (within, evidence, first) in zip(
            alerts, H200ZL, ((60, "backward", "backward +"), (60, "data-loader wait", "data +"))):
        assert a.starts_at >= start - 30 and a.fired_at - start <= within, (cause, a.starts_at - start,
                                                                             a.fired_at - start)
        assert a.decided == "job" and a.evidence["name"] == evidence, (cause, a.decided, a.evidence)
        assert a.diagnosis.startswith(first), a.diagnosis
    assert alerts[0].ends_at is not None and alerts[0].ends_at - H200ZL[0][2] <= 120, alerts[0].ends_at


# h200zm (diag README, held out): h200zi's four causes in one 17.7-minute job, live at d42debb;
# from the loader's end on, the host ran +6-8% over the settled level with no cause on
H200ZM = [("gemm_backward", 1796298007.10, 1796298097.11), ("dataloader", 1796298237.09, 1796298327.07),
          ("empty_cache", 1796298467.11, 1796298557.09), ("optimizer_loop", 1796298697.08, 1796298787.10)]


def _onsets(alerts: list) -> list:
    """(onset, raised, why, decided) of every drift onset: each alert's, and each further
    change's, raised when the next onset took over (``Alert.earlier``'s ``until``)."""
    out = []
    for a in alerts:
        if a.alertname != "StepwatchThroughputDrift":
            continue
        raised = [a.fired_at] + [unix(e["until"]) for e in a.earlier]
        shown = ([(unix(e["onset_at"]), e["diagnosis"], e["decided"]) for e in a.earlier]
                 + [(a.onset, a.diagnosis, a.decided)])
        out += [(on, r, why, decided) for (on, why, decided), r in zip(shown, raised)]
    return out


def test_four_causes_after_episodes_are_each_raised_within_a_minute_on_a_host_that_stays_slower():
    """Replayed at the defaults: each of the four causes has an onset of its own within 30 s of
    its start, raised within 60 s, its why naming the cause first (GEMMs 29 s, loader 32 s, the
    churn 19 s and the for-loop optimizer 44 s as further changes of an episode the host's +8%
    had opened); nothing while healthy. Live, on the code before, the loader was raised 68 s
    after its start and the churn 61 s, the optimizer 89 s: the info window read 5 s after the
    GEMMs' episode ended still held them (raised again at +5% from their onset), and a change
    during an episode was looked for on the warning window alone (bench/results/real_h200zm.md)."""
    lines = load(str(DIAG / "h200zm_1gpu_m_pulses.jsonl.gz"))
    found = _onsets(replay(events(lines), DetectionConfig()))
    assert all(on >= H200ZM[0][1] - 30 for on, _, _, _ in found), found
    for (cause, start, end), first in zip(H200ZM, ("backward +", "data +", "allocator churn", "optimizer +")):
        mine = [(on, r, why) for on, r, why, _ in found if start - 30 <= on < end]
        assert any(r - start <= 60 and why.startswith(first) for _, r, why in mine), \
            (cause, [(on - start, r - start, why[:60]) for on, r, why in mine])


# h200zn (diag README, held out): the GEMMs on for 40 s only, in a 350-s job (the last device
# time of a session); the loader's 40 s ended with the job
H200ZN = [("gemm_backward", 1796301308.38, 1796301348.39), ("dataloader", 1796301428.36, 1796301468.40)]


def test_a_short_pulse_keeps_the_why_it_was_raised_with_after_it_went_away():
    """Live at the defaults and replayed alike: the GEMMs raised 36 s after their start by the
    backward's device time (the floor detector: 40 s is under the median's critical sustain),
    their why "backward +3.6 ms/step" at the raise. Made again as data came, the diagnosis read
    the 40 s with more and more of the steps after them and, live, the alert resolved reading
    "no measured contributor explains the -1.3 ms/step": the why shown now stays once a new one
    reads under half the step change it was made on. Nothing while healthy. The loader's 40 s at
    the job's end (wait 0.2 -> 5.5 ms), +9.7% over the seconds before it, is raised too, dated by
    the wait's change (``ShiftTests.led``; never raised before that)."""
    lines = load(str(DIAG / "h200zn_1gpu_m_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"] * 2, [a.fired_summary for a in alerts]
    a, loader = alerts
    _, start, _ = H200ZN[1]
    assert abs(loader.starts_at - start) <= 10 and loader.fired_at - start <= 45, (loader.starts_at - start,
                                                                                  loader.fired_at - start)
    assert loader.decided == "job" and loader.evidence["name"] in ("data", "data-loader wait"), loader.evidence
    _, start, end = H200ZN[0]
    assert a.starts_at >= start - 30 and a.fired_at - start <= 60, (a.starts_at - start, a.fired_at - start)
    assert a.decided == "job" and a.evidence["name"] == "backward", (a.decided, a.evidence)
    assert a.ends_at is not None and a.diagnosis.startswith("backward +"), a.diagnosis


# h200zo (diag README, held out): h200zm's four causes again, live at 1364c6b; this host's 5-s
# medians wandered 40-47 ms while healthy (z spreads of the step: +14..16%)
H200ZO = [("gemm_backward", 1796313448.25, 1796313538.27), ("dataloader", 1796313678.24, 1796313768.25),
          ("empty_cache", 1796313908.25, 1796313998.28), ("optimizer_loop", 1796314138.27, 1796314228.28)]


def test_four_causes_on_a_noisy_host_are_each_raised_within_a_minute_in_episodes_of_their_own():
    """Replayed at the defaults: each cause raised in an episode of its own within 60 s of its
    start (GEMMs 35 s, loader 49 s, the churn 21 s, the for-loop optimizer 35 s), decided by its
    evidence, its why naming it first, resolved within 2 min of its end; nothing while healthy.
    Live, on the code before, the for-loop optimizer was raised 85 s after its start: its
    optimizer grew 4.9 -> 8..11 ms (its host time with it) while the step wobbled +0..20% bucket
    to bucket, and a host-paced phase was never read in its own spreads, nor a critical shift
    spared the sustain its evidence makes moot (bench/results/real_h200zo.md)."""
    lines = load(str(DIAG / "h200zo_1gpu_m_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"] * 4, [a.fired_summary for a in alerts]
    for a, (cause, start, end), first in zip(alerts, H200ZO, ("backward +", "data +", "allocator churn",
                                                             "optimizer +")):
        assert a.starts_at >= start - 30 and a.fired_at - start <= 60, (cause, a.starts_at - start,
                                                                         a.fired_at - start)
        assert a.decided == "job" and a.diagnosis.startswith(first), (cause, a.decided, a.diagnosis)
        assert a.ends_at is not None and a.ends_at - end <= 120, (cause, a.ends_at and a.ends_at - end)


# h200zp (diag README, held out): a launch-bound job (9.8-18 ms steps as its host wandered), four
# causes in turn, live at 42a8dd2
H200ZP = [("small_ops", 1796327345.22, 1796327435.22), ("dataloader", 1796327575.21, 1796327665.21),
          ("empty_cache", 1796327805.21, 1796327895.21), ("optimizer_loop", 1796328035.21, 1796328125.22)]


def test_a_launch_bound_job_s_causes_are_raised_within_a_minute_and_its_host_s_rise_named_as_the_host():
    """Replayed at the defaults: the tiny ops in forward (25 s), ``empty_cache()`` (17 s) and the
    for-loop optimizer (23 s) each raised in an episode of its own, decided by its evidence and
    named first by its why; nothing while healthy; each resolved within 2 min of its end. The
    slower loader never slowed this job (its wait stood at 0.1 ms; the host slowed as it began,
    every phase's host time up): that episode is decided by the step times and its why names the
    host. Live, the ``empty_cache()`` episode was dated 74 s early, at the host's rise before it
    (its warning then read as the loader's): the allocator's calls now date the change
    (bench/results/real_h200zp.md)."""
    lines = load(str(DIAG / "h200zp_1gpu_s_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert [a.alertname for a in alerts] == ["StepwatchThroughputDrift"] * 4, [a.fired_summary for a in alerts]
    for a, (cause, start, end) in zip(alerts, H200ZP):
        assert a.starts_at >= start - 30 and a.fired_at - start <= 60, (cause, a.starts_at - start,
                                                                         a.fired_at - start)
        assert a.ends_at is not None and a.ends_at - end <= 120, (cause, a.ends_at and a.ends_at - end)
    for a, first in zip([alerts[0], alerts[2], alerts[3]], ("forward +", "allocator churn", "optimizer +")):
        assert a.decided == "job" and a.diagnosis.startswith(first), (a.decided, a.diagnosis)
    loader = alerts[1]
    assert loader.decided == "steps" and "host +" in loader.diagnosis.split(";")[0], loader.diagnosis


# h200zq (diag README, held out): h200zo's four causes again, live at 10d501d, on a host whose
# forward wandered up with no cause on (its device and host time +2-5 ms, 30-80 s at a time)
H200ZQ = [("gemm_backward", 1796337868.60, 1796337958.63), ("dataloader", 1796338098.59, 1796338188.60),
          ("empty_cache", 1796338328.59, 1796338418.64), ("optimizer_loop", 1796338558.61, 1796338648.62)]


def test_a_slower_loader_whose_wait_is_under_half_the_step_s_growth_is_raised_and_named_as_the_loader():
    """Replayed at the defaults: the GEMMs (raised 30 s after their start), the slower loader
    (22 s) and ``empty_cache()`` (23 s, a further change of an episode the host's forward opened
    51 s before it: forward's device and host time +2-3 ms, read as device work) each raised within 60 s with an onset of its own, decided by its evidence,
    its why naming it first; nothing before the first cause. Live, at the code before, the loader
    was decided by the step times and its why read "forward +2.6 ms/step (host-bound ...)"
    first: its wait grew 0.2 -> 1.9 ms (5-s means), under half the step's +4.1 ms, the device
    left idle by it and forward then run at the host's pace. The for-loop optimizer did not slow
    this job (its steps 42.2 -> 41.7 ms against the 1,200 before, the host's slack taking its
    +10 ms of host time): no onset of its own, not asserted (bench/results/real_h200zq.md)."""
    lines = load(str(DIAG / "h200zq_1gpu_m_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert alerts and min(a.fired_at for a in alerts) > H200ZQ[0][1], [a.fired_summary for a in alerts]
    onsets = _onsets(alerts)
    for (cause, start, _), first in zip(H200ZQ, ("backward +", "data +", "allocator churn")):
        mine = [o for o in onsets if start - 30 <= o[0] <= start + 60 and o[1] - start <= 60]
        assert mine, (cause, [(o[0] - start, o[1] - start, o[2][:60], o[3]) for o in onsets])
        _, _, why, decided = mine[0]
        assert decided == "job" and why.startswith(first), (cause, decided, why)
    loader = next(a for a in alerts if abs(a.onset - H200ZQ[1][1]) <= 30)
    assert loader.evidence["kind"] == "loader" and loader.ends_at - H200ZQ[1][2] <= 120, (loader.evidence,
                                                                                        loader.ends_at)


# h200zr (diag README, held out): h200zo's four causes again, live at e721c6c; the host ran +12%
# with no cause on for 110 s after the GEMMs (forward's device and host time up) and came back
# to +5% just before the slower loader began
H200ZR = [("gemm_backward", 1796349270.45, 1796349360.47), ("dataloader", 1796349500.45, 1796349590.48),
          ("empty_cache", 1796349730.47, 1796349820.47), ("optimizer_loop", 1796349960.45, 1796350050.45)]


def test_a_slower_loader_inside_the_host_s_own_episode_is_a_further_change_named_as_the_loader():
    """Replayed at the defaults: each of the four causes has an onset of its own within 60 s of
    its start (GEMMs 30 s, the loader 38 s, ``empty_cache()`` 16 s, the for-loop optimizer 45 s),
    decided by its evidence, its why naming it first; nothing before the first cause. Live, at
    the code before, the loader was never raised: the host's own +12% (no evidence) had raised
    the open episode's level, the loader took the step +10% over the +5% the host had come back
    to, +4% over the level raised, and a further change was only looked for above that level
    (bench/results/real_h200zr.md)."""
    lines = load(str(DIAG / "h200zr_1gpu_m_pulses.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert alerts and min(a.fired_at for a in alerts) > H200ZR[0][1], [a.fired_summary for a in alerts]
    onsets = _onsets(alerts)
    for (cause, start, _), first in zip(H200ZR, ("backward +", "data +", "allocator churn", "optimizer +")):
        # (an onset of the cause's own: the host opened an episode 32 s before the for-loop)
        mine = [o for o in onsets if start - 15 <= o[0] <= start + 60 and o[1] - start <= 60]
        assert mine, (cause, [(o[0] - start, o[1] - start, o[2][:60], o[3]) for o in onsets])
        _, _, why, decided = mine[0]
        assert decided == "job" and why.startswith(first), (cause, decided, why)


# h200zs (diag README, held out): h200zo's four causes again, live at b1d0551 on a host that stayed
# steady; AdamW's for-loop moved its step only +2.3% (its host time hid under the device's)
H200ZS = [("gemm_backward", 1796360717.63, 1796360807.63), ("dataloader", 1796360947.62, 1796361037.67),
          ("empty_cache", 1796361177.64, 1796361267.66), ("optimizer_loop", 1796361407.65, 1796361497.66)]


def test_three_real_slowdowns_on_a_steady_host_are_each_their_own_episode_resolved_within_two_minutes():
    """Replayed at the defaults, as live (bench/results/real_h200zs.md): the GEMMs (+11%), the
    slower loader (+9.5%) and ``empty_cache()`` (+24%) each open an episode of their own within
    60 s of their start (live: 30.0, 27.3, 20.6 s), decided by their evidence, the why naming the
    cause first, and each resolves within 2 minutes of the cause's end (live: 66-76 s); nothing is
    raised before the first cause. (The for-loop optimizer, +2.3% for 90 s, is under every
    raise's size: not asserted either way.)"""
    alerts = _drift("h200zs_1gpu_m_pulses.jsonl.gz")
    assert alerts and min(a.fired_at for a in alerts) > H200ZS[0][1], [a.fired_summary for a in alerts]
    def opened(a):  # (the episode's first onset and the why it was first raised with: empty_cache's
        # step grew for 10 s more, a further change of its own episode)
        e = a.earlier[0] if a.earlier else None
        return (unix(e["onset_at"]), e["diagnosis"]) if e else (a.onset, a.diagnosis)

    _each_cause_its_own_episode(alerts, H200ZS, ("backward +", "data +", "allocator churn"), opened)


def _drift(name: str) -> list:
    """The drift alerts of the diag recording ``name`` replayed at the defaults."""
    return [a for a in replay(events(load(str(DIAG / name))), DetectionConfig())
            if a.alertname == "StepwatchThroughputDrift"]


def _none_outside(alerts: list, schedule: list) -> None:
    """No alert of ``alerts`` opens outside the (cause, start, end) spans of ``schedule`` (15 s
    before a start to 30 s after its end): nothing while the job is healthy."""
    outside = [a for a in alerts if not any(start - 15 <= a.onset <= end + 30 for _, start, end in schedule)]
    assert not outside, [(a.onset - schedule[0][1], a.fired_summary) for a in outside]


def _each_cause_its_own_episode(alerts, schedule, firsts, opened=lambda a: (a.onset, a.diagnosis),
                                later: Optional[dict] = None) -> list:
    """For each (cause, start, end) of ``schedule``: one alert of ``alerts`` whose onset (the first
    of ``opened(a)``) lies 15 s before to 60 s after the start, raised within 60 s of it (``later``:
    seconds for a cause allowed more), decided "job", its why (the second of ``opened(a)``) starting
    with the cause's entry of ``firsts``, and resolved within 2 minutes of the end. Returns
    [(cause, alert)]."""
    found = []
    for (cause, start, end), first in zip(schedule, firsts):
        mine = [a for a in alerts if start - 15 <= opened(a)[0] <= start + 60]
        assert len(mine) == 1, (cause, [(opened(a)[0] - start, a.fired_summary[:60]) for a in alerts])
        a = mine[0]
        within = (later or {}).get(cause, 60)
        assert a.fired_at - start <= within and a.decided == "job" and opened(a)[1].startswith(first), (
            cause, a.fired_at - start, a.decided, opened(a)[1][:80])
        assert a.ends_at is not None and a.ends_at - end <= 120, (cause, a.ends_at and a.ends_at - end)
        found.append((cause, a))
    return found


def _churn_its_own(alerts: list, start: float) -> object:
    """The one alert of ``alerts`` opened from 15 s before ``start`` (``empty_cache()`` every
    step, the last cause) on: raised within 60 s of it, decided "job", its why naming allocator
    churn first. Returns it."""
    (churn,) = [a for a in alerts if a.onset >= start - 15]
    assert churn.fired_at - start <= 60 and churn.decided == "job" and churn.diagnosis.startswith(
        "allocator churn"), (churn.fired_at - start, churn.decided, churn.diagnosis[:80])
    return churn


# h200zt (diag README, held out): five causes live at ed071e6 on a host that wandered ~9% between
# them; the last two a forward its host paces (213 tiny operators, a busy training thread)
H200ZT = [("gemm_backward", 1796374488.67, 1796374578.64), ("dataloader", 1796374718.65, 1796374808.67),
          ("empty_cache", 1796374948.68, 1796375038.66), ("small_ops", 1796375178.68, 1796375268.64),
          ("host", 1796375408.65, 1796375498.67)]


def test_five_real_causes_are_each_their_own_episode_whose_text_says_what_decided_it():
    """Replayed at the defaults, as live (bench/results/real_h200zt.md): each cause opens an episode
    of its own, decided "job" by its evidence, the why naming the cause first (the busy thread:
    forward, the phase it ran in, host-bound), raised within 60 s of its start (live: 35.0, 20.6,
    24.1, 32.5 s; the slower loader, +8% on the level before, 63.4 s live on the warning window,
    38 s now on the critical window by its wait: ``ShiftTests.early``), each resolved within 2
    minutes of its end (live: 66-71 s), nothing raised before the first cause. The summary says
    what decided it, as ``decided`` does. The tiny operators (+5..7%) grew forward's host time and
    backward's too, as a slower host does: at first nothing holds them (live, the floor raised
    them 50 s after they began with no evidence); a shift that nothing holds needs a warning's 5%
    over two of its windows, so they are raised when the medians' warning window holds forward's
    time, its host's pace outgrown (95 s). ``empty_cache()`` is decided by the allocator's calls,
    whose count rule stands out of itself (``ShiftTests.holds``)."""
    alerts = _drift("h200zt_1gpu_m_pulses.jsonl.gz")
    assert alerts and min(a.fired_at for a in alerts) > H200ZT[0][1], [a.fired_summary for a in alerts]
    firsts = ("backward +", "data +", "allocator churn", "forward +", "forward +")
    for cause, a in _each_cause_its_own_episode(alerts, H200ZT, firsts, later={"small_ops": 100}):
        assert "; a change of the job: " in a.summary and "(the host's own pace?)" not in a.summary, (cause, a.summary)
        assert "; a change of the job: " in a.fired_summary, (cause, a.fired_summary)
        if cause == "empty_cache":  # (its calls' count stands out: before, "sync +5 ms" held it, raised 5 s later)
            assert "a change of the job: allocator calls" in a.fired_summary, a.fired_summary


def test_a_live_slower_loader_alone_is_raised_within_a_minute_by_its_wait():
    """h200zu (diag README, held out): the loader slower for 90 s, live at a9590e4 (raised 29.7 s
    after it began, critical, by its wait; bench/results/real_h200zu.md): replayed, one episode,
    nothing before the cause, raised within 60 s, decided "job" by the loader's wait, the data
    phase named first."""
    start = 1796378565.59
    lines = load(str(DIAG / "h200zu_1gpu_m_loader.jsonl.gz"))
    alerts = replay(events(lines), DetectionConfig())
    assert len(alerts) == 1, [(a.alertname, a.onset - start, a.fired_summary) for a in alerts]
    a = alerts[0]
    assert a.alertname == "StepwatchThroughputDrift" and start - 15 <= a.onset and a.fired_at - start <= 60, (
        a.onset - start, a.fired_at - start)
    assert a.decided == "job" and a.evidence["name"] == "data-loader wait", (a.decided, a.evidence)
    assert a.diagnosis.startswith("data +") and "(data-loader wait +" in a.diagnosis, a.diagnosis


# h200zv (diag README, held out): four causes live at a553cb2 (the device's own work read against
# the compute phases' host time); the GEMMs in forward are ~250 launches a step, so forward's host
# time grows with them and the GPU idles more (SM activity 73% -> 66%): forward, host-bound
H200ZV = [("gemm_forward", 1796404214.91, 1796404304.91), ("dataloader", 1796404444.89, 1796404534.89),
          ("host", 1796404674.92, 1796404764.90), ("gemm_backward", 1796404904.92, 1796404994.91)]


def test_four_live_causes_at_the_defaults_are_each_raised_within_a_minute_naming_their_phase():
    """Replayed at the defaults, as live (bench/results/real_h200zv.md: raised 19.8, 34.3, 52.9 and
    35.3 s after each start, resolved 65-70 s after each end, nothing while healthy): each cause
    opens one episode of its own, decided "job" by its evidence, the why naming its phase first,
    raised within 60 s of its start and resolved within 2 minutes of its end; nothing is raised
    before the first."""
    alerts = _drift("h200zv_1gpu_m_pulses.jsonl.gz")
    assert len(alerts) == len(H200ZV) and min(a.onset for a in alerts) > H200ZV[0][1] - 15, [
        (a.onset - H200ZV[0][1], a.fired_summary) for a in alerts]
    _each_cause_its_own_episode(alerts, H200ZV, ("forward +", "data +", "forward +", "backward +"))


# h100p (diag README, held out): a launch-bound job on one H100 (12.1 ms median; its host's pace
# moved the 10-s medians 8.5-17.5 ms), four causes live at dc76dca
H100P = [("small_ops", 1796465294.57, 1796465384.57), ("host", 1796465524.56, 1796465614.56),
         ("empty_cache", 1796465754.57, 1796465844.56), ("optimizer_loop", 1796465984.57, 1796466074.57)]


def test_a_launch_bound_job_s_change_ends_when_its_evidence_goes_though_the_host_ran_on_top_of_it():
    """Replayed at the defaults (bench/results/real_h100p.md): each cause raised within 60 s of its
    start in an episode of its own, the why naming it first, resolved within 2 minutes of its end;
    nothing before the first. The tiny ops' episode took a further change that nothing held (the
    host +15% over them for their last 30 s) and, live, stayed open 161 s after they ended, the
    host then +2..6% over its settled level: the forward's evidence it held is now kept through
    that change (71 s). The busy training thread's onset was dated 36 s late by the noisy floors
    and its phase times could not be compared at the raise: its evidence is read again once they
    can be, and it is decided by the step times (the thread slowed every phase, none alone holds
    it), as its text says."""
    alerts = _drift("h100p_1gpu_s_pulses.jsonl.gz")
    assert len(alerts) == len(H100P) and min(a.onset for a in alerts) > H100P[0][1] - 15, [
        (a.onset - H100P[0][1], a.fired_summary) for a in alerts]
    for (cause, start, end), a, first in zip(H100P, alerts, ("forward +", "forward +", "allocator churn",
                                                            "optimizer +")):
        assert start - 15 <= a.onset <= start + 60 and a.fired_at - start <= 60, (cause, a.onset - start,
                                                                                  a.fired_at - start)
        assert a.diagnosis.startswith(first), (cause, a.diagnosis)
        assert a.ends_at is not None and a.ends_at - end <= 120, (cause, a.ends_at and a.ends_at - end)
    assert [a.decided for a in alerts] == ["job", "steps", "job", "job"], [a.decided for a in alerts]
    assert "no one thing the agent measures" in alerts[1].summary, alerts[1].summary


# h100q (diag README, held out): a launch-bound job on one H100 (9.0 ms median; its 30-s medians
# wandered +-5% while it settled, and +3..9% after its first cause), four causes live at d2a1291
H100Q = [("small_ops", 1796517005.68, 1796517095.69), ("host", 1796517235.68, 1796517325.68),
         ("empty_cache", 1796517465.68, 1796517555.68), ("optimizer_loop", 1796517695.68, 1796517785.68)]


def test_evidence_that_stood_out_must_stand_out_at_the_raise_and_each_cause_is_its_own_episode():
    """Replayed at the defaults (bench/results/real_h100q.md). Live, at d2a1291, the host ran
    +3..9% after the tiny ops ended with a 20-s +45% spike in it; its forward, read at one onset,
    stood 10 of its spreads out (the spike) and raised a +6.0% warning 16 s before the next cause,
    shown with the evidence read at the raise's own onset: the GPU's busy time +0.3 ms, which has
    no spread of its own; that episode took the next three causes as further changes and never
    ended. A shift found under ``z`` only because its evidence stood out is now raised only if the
    evidence at its raise's onset stands out too: nothing is raised between the causes. The tiny
    ops (forward +35%, host-paced, while the step grew +8..14%) were raised 84 s after they began:
    the step's spreads, measured over a settling that held a +5% hump, asked +18.5%, and a
    host-paced phase counted only when it grew 4x faster than the step; at 3x, 54 s, and the busy
    thread's episode then ends with it (before: its medians' episode, raised on the host's spike
    with no evidence, stayed open 305 s after it and took ``empty_cache()`` as a further change).
    Each cause is its own episode, its why naming it first, resolved within 2 minutes of its end.
    The job's last 40 s, +20% on its own clock with no cause on and the GPU's busy time +0.9 ms a
    step, are raised (a fifth episode)."""
    alerts = _drift("h100q_1gpu_s_pulses.jsonl.gz")
    onsets = _onsets(alerts)
    # nothing between the causes (30 s after one's end to the next's start), nor before the first
    quiet = [(H100Q[0][1] - 400, H100Q[0][1] - 15)] + [(e + 30, s) for (_, _, e), (_, s, _) in zip(H100Q, H100Q[1:])]
    assert not [o for o in onsets for lo, hi in quiet if lo <= o[0] < hi and o[1] < hi], [
        (o[0] - H100Q[0][1], o[1] - H100Q[0][1]) for o in onsets]
    # (not _each_cause_its_own_episode: the busy thread's episode ends decided by a further change
    # of the host's on top of it, which nothing holds)
    for a, (cause, start, end), first in zip(alerts, H100Q, ("forward +", "forward +", "allocator churn",
                                                             "optimizer +")):
        assert start - 15 <= a.onset <= end and a.fired_at - start <= 60, (cause, a.onset - start,
                                                                            a.fired_at - start)
        assert a.diagnosis.startswith(first), (cause, a.diagnosis)
        assert a.ends_at is not None and a.ends_at - end <= 120, (cause, a.ends_at and a.ends_at - end)
    assert len(alerts) == 5 and alerts[4].onset > H100Q[-1][2] + 30, [(a.onset - H100Q[0][1]) for a in alerts]


# h100r (diag README, held out): a launch-bound job on one H100 (10.7 ms median; its host moved
# the 10-s medians 9.3-14.2 ms with no cause on), two causes live at c37d97c
H100R = [("host", 1796520510.91, 1796520570.92), ("empty_cache", 1796520690.92, 1796520750.91)]


def test_a_busy_thread_and_the_cache_emptied_on_a_wandering_launch_bound_host_live_at_the_fix():
    """Replayed at the defaults, as live (bench/results/real_h100q.md, its h100r part): the busy
    training thread raised 50 s after it began (its onset dated 24 s late by the noisy floors),
    decided by forward's time, and ``empty_cache()`` 25 s after it began by the allocator's calls,
    each its own episode, its why naming it first, resolved within 2 minutes of its end; nothing
    before the first cause, between them, or after the last, on a host whose 10-s medians went
    +45% for 10 s with no cause on."""
    alerts = _drift("h100r_1gpu_s_pulses.jsonl.gz")
    assert len(alerts) == 2 and not alerts[0].earlier and not alerts[1].earlier, [a.fired_summary for a in alerts]
    _each_cause_its_own_episode(alerts, H100R, ("host +", "allocator churn"))


# h200zza (diag README, held out): four causes live at 55119db on one H200 (size m, 42.7 ms median);
# 67 s before the fourth cause the job's own step went 39.3 -> 46.5 ms with nothing injected (its
# forward's host time and the GPU's busy time a step both +5 ms, clocks unchanged), and the busy
# thread then moved it only +1.6% (46.5 -> 47.2 ms)
H200ZZA = [("gemm_backward", 1796529687.56, 1796529777.54), ("dataloader", 1796529917.52, 1796530007.53),
           ("empty_cache", 1796530147.54, 1796530237.52), ("host", 1796530377.54, 1796530467.55)]


def test_three_live_causes_and_a_slowdown_nothing_injected_are_each_raised_as_a_change_of_the_job():
    """Replayed at the defaults, as live (bench/results/real_h200zza.md: raised 25.1, 43.5 and 20.8
    s after each start, resolved 62-77 s after each end): the GEMMs in backward, the slower loader
    and ``empty_cache()`` each open one episode of their own, decided "job" by their evidence, the
    why naming their phase first. The job's own +18% that came 67 s before the busy thread is
    raised too, before the thread began, as a change of the job held by the GPU's busy time; the
    thread on top of it (+1.6%) opens nothing of its own. Nothing is raised before the first cause
    or in the gaps between the first three."""
    alerts = _drift("h200zza_1gpu_m_pulses.jsonl.gz")
    assert len(alerts) == 4 and alerts[0].onset > H200ZZA[0][1] - 15, [
        (a.onset - H200ZZA[0][1], a.fired_summary) for a in alerts]
    _each_cause_its_own_episode(alerts[:3], H200ZZA[:3], ("backward +", "data +", "allocator churn"))
    own = alerts[3]  # the job's own slowdown: after empty_cache's end + 30 s, raised before the thread
    assert H200ZZA[2][2] + 30 < own.onset and own.fired_at < H200ZZA[3][1], (own.onset - H200ZZA[3][1],
                                                                             own.fired_at - H200ZZA[3][1])
    assert own.decided == "job" and "a change of the job: GPU busy time +" in own.fired_summary, (
        own.decided, own.fired_summary)


# h100s (diag README, held out): four causes live at a2b1245 on one H100 (size m, 47.3 ms median);
# the AdamW for-loop moved the step only +5.5% there (optimizer device 6.5 -> 7.7 ms, its host time
# 3.7 -> 15.4 ms), under the +10% that the 60-s horizon is for
H100S = [("gemm_backward", 1796540553.05, 1796540643.03), ("dataloader", 1796540783.02, 1796540873.03),
         ("empty_cache", 1796541013.05, 1796541103.04), ("optimizer_loop", 1796541243.02, 1796541333.04)]


def test_live_causes_of_ten_percent_and_more_are_raised_and_nothing_while_the_job_is_healthy():
    """Replayed at the defaults, as live (bench/results/real_h100s.md: raised 31.3, 33.8 and 22.1 s
    after each start, resolved 67-77 s after each end): the GEMMs in backward (+10.8%), the slower
    loader (+12.3%) and ``empty_cache()`` (+42%) each open one episode of their own, decided "job"
    by their evidence, the why naming their phase first. Nothing opens outside the causes (before
    the first, in the gaps, after the last); the for-loop optimizer (+5.5% for 90 s) may open one
    only by naming the optimizer first."""
    alerts = _drift("h100s_1gpu_m_pulses.jsonl.gz")
    _each_cause_its_own_episode([a for a in alerts if a.onset < H100S[3][1] - 15], H100S[:3],
                                ("backward +", "data +", "allocator churn"))
    _none_outside(alerts, H100S)
    for a in alerts:
        if a.onset >= H100S[3][1] - 15:
            assert a.diagnosis.startswith("optimizer +"), a.diagnosis[:80]


# h100t (diag README, held out): two causes live at c606d67 on one H100 (size m, 48.8 ms median), the
# second ending 10 s before the job
H100T = [("gemm_forward", 1796546286.38, 1796546376.35), ("d2h", 1796546486.60, 1796546576.39)]


def test_live_matrix_products_in_forward_and_a_copy_to_the_host_are_each_raised_with_their_phase():
    """Replayed at the defaults, as live (bench/results/real_h100t.md: raised 20.4 and 59.6 s after
    each start): the GEMMs in forward (+6.9%) and a copy to the host each step (+2.7% on the step's
    median) each open one episode of their own, decided "job", the why naming forward, then the
    host's wait before the optimizer (sync) first; nothing opens while the job is healthy."""
    alerts = _drift("h100t_1gpu_m_pulses.jsonl.gz")
    _each_cause_its_own_episode([a for a in alerts if a.onset < H100T[1][1] - 15], H100T[:1], ("forward +",))
    (copy,) = [a for a in alerts if a.onset >= H100T[1][1] - 15]  # (the job ends 10 s after it: still open)
    assert copy.fired_at - H100T[1][1] <= 60 and copy.decided == "job" and copy.diagnosis.startswith("sync +"), (
        copy.fired_at - H100T[1][1], copy.decided, copy.diagnosis[:80])
    _none_outside(alerts, H100T)


# h100u (diag README, held out): h100s's four causes live at f9b1164 on one H100, batch 4 (29.3 ms
# median) so that the AdamW for-loop moves the step more; 47 s after empty_cache's end the job's own
# step went 28.8 -> 30.3-31.5 ms with nothing injected (forward's device time 8.7 -> 10.1 ms, its
# host time 7.7 -> 9.2 ms, SM clock unchanged) until the for-loop's turn ended
H100U = [("gemm_backward", 1796552483.40, 1796552573.42), ("dataloader", 1796552713.41, 1796552803.40),
         ("empty_cache", 1796552943.42, 1796553033.43), ("optimizer_loop", 1796553173.41, 1796553263.40)]


def test_four_live_causes_at_batch_four_are_each_raised_within_a_minute_with_their_cause_first():
    """Replayed at the defaults, as live (bench/results/real_h100u.md: raised 31.4, 32.7, 19.9 and
    47.3 s after each start, resolved 70-76 s after each end): the GEMMs in backward, the slower
    loader and ``empty_cache()`` each open one episode of their own, decided "job", the why naming
    their phase first; the job's own slowdown after the churn (+4-8% on its clock) is raised as a
    change of the job held by the GPU's busy time, and the for-loop optimizer on top of it shows
    its own onset and raise within 60 s as a further change, the optimizer named first, the
    episode resolved within 2 minutes of its end. Nothing before the first cause or in the gaps
    between the first three."""
    alerts = _drift("h100u_1gpu_m_pulses.jsonl.gz")
    assert len(alerts) == 4 and alerts[0].onset > H100U[0][1] - 15, [
        (a.onset - H100U[0][1], a.fired_summary) for a in alerts]
    _each_cause_its_own_episode(alerts[:3], H100U[:3], ("backward +", "data +", "allocator churn"))
    last = alerts[3]
    own = last.earlier[0] if last.earlier else None  # the job's own slowdown, raised first
    assert own and H100U[2][2] + 30 < unix(own["onset_at"]) < H100U[3][1] and own["decided"] == "job" \
        and "a change of the job: GPU busy time +" in own["raised"], (own or last.fired_summary)
    opt = [(on, r, why, decided) for on, r, why, decided in _onsets([last])
           if H100U[3][1] - 15 <= on <= H100U[3][1] + 60]
    assert len(opt) == 1 and opt[0][1] - H100U[3][1] <= 60 and opt[0][2].startswith("optimizer +") \
        and opt[0][3] == "job", [(on - H100U[3][1], r - H100U[3][1], why[:60]) for on, r, why, _ in opt]
    assert last.ends_at is not None and last.ends_at - H100U[3][2] <= 120, last.ends_at - H100U[3][2]


# h100v (diag README, held out): two causes live at d05e096 on one H100 (size m, batch 8, 47.5 ms):
# GEMMs in forward (+10.2% on the job's clock; their launches grew forward's host time with its
# device time), the host slowing over the same seconds (backward's and the optimizer's host time
# +3.8 and +1.2 ms a step 30-60 s in), then GEMMs in backward
H100V = [("gemm_forward", 1796572985.20, 1796573075.22), ("gemm_backward", 1796573215.18, 1796573305.19)]


def test_live_matrix_products_in_forward_on_a_host_that_slowed_with_them_are_raised_after_the_warning_window():
    """Replayed at the defaults, as live (bench/results/real_h100v.md: raised 74.1 and 31.7 s after
    each start): each cause opens one episode of its own, decided "job", the why naming its phase
    first, and nothing opens while the job is healthy. The forward GEMMs are raised **later than
    issue 65's 60 s**: forward held the shift from 22 s in (14.8 -> 18.4 ms of device time), but
    stood only 3.2-3.5 of its own spreads out (`evidence_z` 4: this job's forward device time
    wanders with its host's launches), and from 53 s in the host's slowing in every phase left
    only the GPU's busy time holding it, which the step's own `z` decides: raised at warning after
    the warning window. The backward GEMMs' episode is still open when the job ends 10 s after
    them."""
    alerts = _drift("h100v_1gpu_m_pulses.jsonl.gz")
    _each_cause_its_own_episode([a for a in alerts if a.onset < H100V[1][1] - 15], H100V[:1], ("forward +",),
                                later={"gemm_forward": 80})
    (back,) = [a for a in alerts if a.onset >= H100V[1][1] - 15]
    assert back.fired_at - H100V[1][1] <= 60 and back.decided == "job" and back.diagnosis.startswith("backward +"), (
        back.fired_at - H100V[1][1], back.decided, back.diagnosis[:80])
    _none_outside(alerts, H100V)


# h100x (diag README, held out): four causes live at 3caa55a on one H100 (size m, batch 8, 45.7 ms);
# on this card the backward GEMMs (10% of the step asked for) moved the step +4.5% and the slower
# loader +5.7%: changes of issue 65's +5% kind, the forward GEMMs (15%) +13.4%, empty_cache() +36%
H100X = [("gemm_backward", 1796578475.55, 1796578565.54), ("dataloader", 1796578705.58, 1796578795.56),
         ("gemm_forward", 1796578935.54, 1796579025.54), ("empty_cache", 1796579165.57, 1796579255.55)]


def test_four_live_causes_on_an_h100_are_each_raised_in_their_own_episode_with_their_cause_first():
    """Replayed at the defaults, as live (bench/results/real_h100x.md: raised 63.9, 78.2, 30.5 and
    18.8 s after each start): each cause opens one episode of its own, decided "job" by its
    evidence, the why naming the cause first, the first three resolved within 2 minutes of their
    end (live: 66-71 s), and nothing opens while the job is healthy. The +4.5% and +5.7% changes
    are raised within issue 65's 3 minutes for +5%, not its 60 s for +10%: they are not +10%
    changes on this card. The ``empty_cache()`` episode is still open when the job ends 70 s after
    it; its further change, which nothing holds of its own, is shown on top of the job's change
    (``Episode.evidence``)."""
    alerts = _drift("h100x_1gpu_m_pulses.jsonl.gz")
    _each_cause_its_own_episode([a for a in alerts if a.onset < H100X[3][1] - 15], H100X[:3],
                                ("backward +", "data +", "forward +"), later={"gemm_backward": 180, "dataloader": 180})
    (churn,) = [a for a in alerts if a.onset >= H100X[3][1] - 15]
    # its first onset (a further change during the turn, the step still growing, follows it)
    onset, why, decided = ((unix(churn.earlier[0]["onset_at"]), churn.earlier[0]["diagnosis"], churn.earlier[0]["decided"])
                           if churn.earlier else (churn.onset, churn.diagnosis, churn.decided))
    assert (H100X[3][1] - 15 <= onset and churn.fired_at - H100X[3][1] <= 60 and decided == "job"
            and why.startswith("allocator churn")), (onset - H100X[3][1], churn.fired_at - H100X[3][1], decided, why[:80])
    # the further change (+19% -> +47% over the turn, the host slower in every phase) is held by
    # nothing of its own: the episode still shows the job's change it came on top of, never "the
    # host's own pace?" against its own start; the job's change shown by its calls, as the why
    # names it (the sync phase, +5.1 ms, is what they do to the step)
    assert churn.earlier and churn.decided == "job" and churn.summary.endswith(
        "a change of the job: allocator calls 0.0 -> 110.7 per step; the further change: no one thing the agent "
        "measures beside the step time holds it"), (churn.decided, churn.summary)
    _none_outside(alerts, H100X)


# h200zzb (diag README, held out): four causes live on one H200 at a1940a0 (bench/results/real_h200zzb.md);
# its host ran +6..10% for a minute between the first two causes, no cause on
H200ZZB = [("gemm_backward", 1796588954.20, 1796589044.22), ("dataloader", 1796589184.22, 1796589274.20),
           ("optimizer_loop", 1796589414.23, 1796589504.19), ("empty_cache", 1796589644.20, 1796589734.19)]


def test_four_live_causes_on_an_h200_are_each_raised_within_a_minute_with_their_cause_first():
    """Replayed at the defaults (bench/results/real_h200zzb.md): the GEMMs in backward (+5.5%),
    the AdamW for-loop (+22%) and ``empty_cache()`` (+47%) each open an episode of their own
    within 60 s of their start (32.4, 19.3, 22.7 s), decided "job", the why naming the cause first;
    the first two resolve within 2 minutes of their end. The slower loader (+19%) came while an
    episode the host's own +6.7% had opened 92 s before it was raised (0.7 s after the loader
    began, by the optimizer's device time; 5.8 s after it began now that the optimizer's level before
    is not read inside the GEMMs' ended episode): it is a further change of that episode, its onset and
    text its own, taken 20.8 s after the loader began with the data phase named first. Live, at
    the code before, the floor's episode raised it critical with its own text 20 s after its
    start while the alert kept the host's onset for 57 s more (each detector counted no change of
    its own), and its why led with "host +9.5 ms/step (slower in every phase that grew (data
    +5.3, ...)". Nothing fires before the first cause or in a gap."""
    alerts = _drift("h200zzb_1gpu_m_pulses.jsonl.gz")
    assert all(any(start <= a.fired_at <= end + 30 for _, start, end in H200ZZB) for a in alerts), [
        (a.fired_at - H200ZZB[0][1], a.fired_summary) for a in alerts]
    own = [s for s in H200ZZB if s[0] != "dataloader"]
    _each_cause_its_own_episode([a for a in alerts if not a.earlier or a.onset > H200ZZB[2][1] - 15], own[:2],
                                ("backward +", "optimizer +"))
    _churn_its_own(alerts, H200ZZB[3][1])
    _, start, end = H200ZZB[1]
    (loader,) = [a for a in alerts if start - 15 <= a.onset <= start + 60]
    (host,) = loader.earlier  # (the host's own +6.7%, raised as the loader began)
    assert H200ZZB[0][2] + 30 < unix(host["onset_at"]) < start and unix(host["until"]) - start <= 60, (
        unix(host["onset_at"]) - start, unix(host["until"]) - start)
    # (not "led" by the optimizer's device time against a "before" inside the GEMMs' ended
    # episode, raised 0.7 s after the loader began: now against the settled level, 5.8 s after)
    assert loader.fired_at - start > 5 and "vs this job's level settled" in host["raised"], (
        loader.fired_at - start, host["raised"])
    assert loader.decided == "job" and loader.evidence["name"] == "data" and loader.diagnosis.startswith(
        "data +"), (loader.decided, loader.evidence, loader.diagnosis[:80])
    assert loader.ends_at is not None and loader.ends_at - end <= 120, loader.ends_at - end


# h200zzc (diag README, held out): h200zzb's four causes again, live at 4222430 on one H200 whose
# job ran 41.8 ms a step; the AdamW for-loop moved its step only +4.4% this time, in bursts
H200ZZC = [("gemm_backward", 1796622746.04, 1796622836.02), ("dataloader", 1796622976.03, 1796623066.04),
           ("optimizer_loop", 1796623206.02, 1796623296.04), ("empty_cache", 1796623436.06, 1796623526.03)]


def test_four_live_causes_again_each_their_own_episode_with_the_cause_first_and_nothing_while_healthy():
    """Replayed at the defaults (bench/results/real_h200zzc.md): the GEMMs in backward (+7.7%),
    the slower loader (+10.2%) and AdamW's for-loop each open an episode of their own within 60 s
    of their start (live: 32.2, 35.6 s; the for-loop never), decided "job", the why naming the
    cause first, each resolved within 2 minutes of its end; ``empty_cache()`` (+18%) opens its own
    within 60 s (21.3 s) as allocator churn. Nothing is raised while the job is healthy. The
    for-loop (+4.4% over its 90 s) came in bursts (10-s medians +13, +6, +14, 0, +2, +1, +10,
    +10, +1%), its optimizer phase +1.5..4.4 ms at 7-22 of its own spreads: the critical window
    stood +10.1% 28 s after it began, found by the optimizer's evidence; live, the raise moved its
    onset to the optimizer's own change, where too few blocks give no spread yet, and dropped it
    (``ShiftTests.holds_redated`` now keeps the optimizer as read at the steps' onset): 29 s."""
    alerts = _drift("h200zzc_1gpu_m_pulses.jsonl.gz")
    _none_outside(alerts, H200ZZC)
    _each_cause_its_own_episode(alerts, H200ZZC[:3], ("backward +", "data +", "optimizer +"))
    churn = _churn_its_own(alerts, H200ZZC[3][1])
    # its text shows the calls, as its why does (live: "sync +4.2 ms/step", the host waiting on the
    # device, which is what the calls do to the step)
    assert "a change of the job: allocator calls 0.0 -> " in churn.fired_summary, churn.fired_summary


# h100y (diag README, held out): four causes live at 54ebf39 on one H100 (an H200 was asked for),
# so the H100's set: GEMMs in backward at 10%, the slower loader, GEMMs in forward at 15%,
# ``empty_cache()``
H100Y = [("gemm_backward", 1796631462.04, 1796631552.04), ("dataloader", 1796631692.03, 1796631782.01),
         ("gemm_forward", 1796631922.03, 1796632012.04), ("empty_cache", 1796632152.05, 1796632242.01)]


def test_four_live_causes_on_an_h100_at_this_code_each_their_own_episode_with_the_cause_first():
    """Replayed at the defaults (bench/results/real_h100y.md): the GEMMs in backward (+4.4% over
    the 1,200 steps before; +5.2% by the p10 step on the settled level), the slower loader
    (+11.3%) and the GEMMs in forward (+14.2%) each open an episode of their own within 60 s of
    their start (live: 48.2, 31.5, 29.8 s), decided "job", the why naming the cause first, each
    resolved within 2 minutes of its end; ``empty_cache()`` (+12.4%) opens its own in 22.0 s as
    allocator churn, its text showing the calls. Nothing is raised while the job is healthy. Live
    the same four outcomes, nothing else raised."""
    alerts = _drift("h100y_1gpu_m_pulses.jsonl.gz")
    _none_outside(alerts, H100Y)
    _each_cause_its_own_episode(alerts, H100Y[:3], ("backward +", "data +", "forward +"))
    churn = _churn_its_own(alerts, H100Y[3][1])
    assert "a change of the job: allocator calls 0.0 -> " in churn.fired_summary, churn.fired_summary


# h100z (diag README, held out): a launch-bound job live at 06b8320 on one H100 (8.2 ms steps),
# GEMMs at 0.45 of the step in backward, then in forward (90 s on, 100 s off)
H100Z = [("gemm_backward", 1796654296.02, 1796654386.02), ("gemm_forward", 1796654486.02, 1796654576.02)]


def test_gemms_added_to_a_live_launch_bound_job_each_their_own_episode_with_the_phase_first():
    """Replayed at the defaults (bench/results/real_h100z.md): a launch-bound H100 job (8.2 ms
    steps) whose backward, then forward, got GEMMs (+18.2% and +20.6% of the step): each opens an
    episode of its own within 60 s of its start (live: 18.6 and 18.8 s), decided "job", the why
    naming the phase first, resolved within 2 minutes of its end; nothing raised while healthy.
    The host waited for backward's added work inside the phase (its host time 3.7 -> 5.0 ms with
    its device time: held host-paced); forward's device time grew past its host time (3.1 -> 6.4
    against 3.0 -> 4.8 ms; backward's device time fell as much, the GPU still running forward's
    work when the host entered backward)."""
    alerts = _drift("h100z_1gpu_s_pulses.jsonl.gz")
    _none_outside(alerts, H100Z)
    _each_cause_its_own_episode(alerts, H100Z, ("backward +", "forward +"))


# h100za (diag README, held out): the issue's first two causes live at a3a4de8's detection on one
# H100 (47 ms steps), GEMMs in backward, then the loader slower (90 s on, 140 s off); the job ends
# 30 s after the loader's end
H100ZA = [("gemm_backward", 1796684202.73, 1796684292.74), ("dataloader", 1796684432.74, 1796684522.73)]


def test_a_slower_loader_after_an_episode_that_came_and_went_is_raised_live():
    """Replayed at the defaults (bench/results/real_h100za.md): the loader's change after the
    backward GEMMs' episode had come and gone, the case that was once taken for the job's own wave
    and never raised, opens an episode of its own 36.9 s after its start (live: the same), decided
    "job", the why naming the data phase first; the GEMMs' episode before it 43.4 s, resolved
    within 2 minutes of their end; nothing raised while healthy."""
    alerts = _drift("h100za_1gpu_m_pulses.jsonl.gz")
    _none_outside(alerts, H100ZA)
    _each_cause_its_own_episode(alerts, H100ZA[:1], ("backward +",))
    _, start, _ = H100ZA[1]  # (its end: the job ended 30 s after it, before any resolve)
    (loader,) = [a for a in alerts if start - 15 <= a.onset <= start + 60]
    assert loader.fired_at - start <= 60 and loader.decided == "job", (loader.fired_at - start, loader.decided)
    assert loader.diagnosis.startswith("data +") and "data-loader wait +" in loader.diagnosis, loader.diagnosis
    assert "a further change" not in loader.fired_summary, loader.fired_summary  # (its own episode)
