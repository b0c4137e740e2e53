"""Real 2-GPU NCCL DDP jobs with phase times (tests/data/real/phases, README beside them),
replayed at default detection settings: a rank slower in its own work is named from the phase
times within a minute of the change, the other rank's slowdown points at it, and the healthy
job raises nothing."""

from __future__ import annotations

import pathlib

from stepwatch.collector._replay import replay
from stepwatch.collector.detect import DetectionConfig
from stepwatch.collector.tools.corpus import events, load

PHASES = pathlib.Path(__file__).resolve().parents[1] / "data" / "real" / "phases"


def _replay(name: str) -> list:
    return replay(events(load(str(PHASES / name))), DetectionConfig())


def _stragglers(alerts) -> dict:
    return {a.rank: a for a in alerts if a.alertname == "StepwatchStragglerRank"}


def test_a_busy_host_on_rank_1_is_named_within_a_minute():
    """Rank 1's training thread busy 7.7 ms before each forward: both ranks 13% slower, step
    times equal; rank 0 waits, mostly in its backward."""
    alerts = _replay("h100e_2gpu_m_host_r1.jsonl.gz")
    strag = _stragglers(alerts)
    assert set(strag) == {1}, [(a.alertname, a.rank, a.fired_summary) for a in alerts]
    assert 0 < strag[1].fired_at - 1795732052.59 <= 60, strag[1].fired_at
    assert "its own work takes +" in strag[1].fired_summary, strag[1].fired_summary
    # the host did more work: named first, as the forward pass it delayed
    assert strag[1].diagnosis.startswith("forward +") and "(host-bound: its host time +" in strag[1].diagnosis, \
        strag[1].diagnosis
    assert {a.alertname for a in alerts} == {"StepwatchStragglerRank"}  # (drift arms after 3 minutes)


def test_a_slow_data_loader_on_rank_1_is_named_and_rank_0s_slowdown_points_at_it():
    alerts = _replay("h100e_2gpu_m_loader_r1.jsonl.gz")
    strag = _stragglers(alerts)
    assert set(strag) == {1}, [(a.alertname, a.rank, a.fired_summary) for a in alerts]
    assert 0 < strag[1].fired_at - 1795731887.55 <= 60, strag[1].fired_at
    assert strag[1].diagnosis.startswith("data +") and "data-loader wait +" in strag[1].diagnosis, strag[1].diagnosis
    drift = {a.rank: a for a in alerts if a.alertname == "StepwatchThroughputDrift"}
    assert drift[0].diagnosis.startswith("waiting for rank 1 (straggler): sync +"), drift[0].diagnosis
    assert drift[1].diagnosis.startswith("data +") and "data-loader wait +" in drift[1].diagnosis, \
        drift[1].diagnosis


def test_the_healthy_job_raises_nothing():
    alerts = _replay("h100e_2gpu_m_healthy.jsonl.gz")
    assert alerts == [], [(a.alertname, a.rank, a.fired_summary) for a in alerts]


def test_a_shared_gpu_is_named_before_the_gemms_and_the_gemms_after():
    """GPU 0 shared with a benchmark all along (rank 0 slower in its own work from the start),
    then GEMMs in rank 1's backward from step 834: both are real stragglers, in that order."""
    alerts = _replay("h100f_2gpu_m_gemm_r1_gpu0_shared.jsonl.gz")
    strag = _stragglers(alerts)
    assert set(strag) == {0, 1}, [(a.alertname, a.rank, a.fired_summary) for a in alerts]
    assert strag[0].fired_at < 1795733344.65 < strag[1].fired_at, (strag[0].fired_at, strag[1].fired_at)
