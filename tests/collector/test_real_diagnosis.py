"""Real 1-GPU jobs on an H100 with one injected cause each (tests/data/real/diag, README beside
them), replayed at the default detection settings: each slowdown is raised once, as throughput
drift, within a minute of the change, and its diagnosis names the cause first."""

from __future__ import annotations

import pathlib

import pytest

from stepwatch.collector._replay import replay
from stepwatch.collector.detect import DetectionConfig
from stepwatch.collector.tools.corpus import events, load

DIAG = pathlib.Path(__file__).resolve().parents[1] / "data" / "real" / "diag"


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


def test_a_change_two_steps_before_a_window_ends_is_the_jobs_own_once_the_churn_is_seen():
    """The step time rose as a profiler window closed: first taken for the profiler's cost, the
    allocator churn (which no window makes) makes it the job's own, in the same evaluation: the
    overhead alert never stays firing, the drift alert says what it was first taken for."""
    alerts = _alerts("empty_cache")
    overhead = [a for a in alerts if a.alertname == "StepwatchProfilerOverhead"]
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    assert overhead and all(a.state == "resolved" for a in overhead), [(a.alertname, a.state) for a in alerts]
    assert drift and drift[0].state == "firing"
    assert "first taken for the agent's profiler window ending at step 4,097" in drift[0].fired_summary, \
        drift[0].fired_summary


def test_launch_bound_tiny_operators_are_named_as_forward_on_the_host():
    alerts = _alerts("small_ops_cut")
    drift = [a for a in alerts if a.alertname == "StepwatchThroughputDrift"]
    assert len(drift) == 1, [(a.alertname, a.fired_summary) for a in alerts]
    assert drift[0].diagnosis.startswith("forward +") and "(host-bound: its host time +" in drift[0].diagnosis, \
        drift[0].diagnosis
