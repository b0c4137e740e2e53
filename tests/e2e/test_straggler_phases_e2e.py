"""A rank slower in its own work is named from the agents' always-on phase times, with no
profiler window: real 2-rank gloo DDP training on CPU, rank 1 doing 40 ms of extra matrix
products in its backward pass from step 150 of 360. Both ranks show the same step time (rank 0
waits in gloo's all-reduce, between its last gradient and its optimizer step), so neither step
times nor data-loader waits can tell; the phase times can, once the job's step has grown against
its level before (the rule's cost check: 14 blocks of that level first). The same job without
the extra work raises nothing."""

from __future__ import annotations

import time

from test_straggler_windows_e2e import _run as _run_job, _stragglers

WINDOWS_OFF = {"STEPWATCH_WINDOWS": 0}  # the phase times alone (at their default budget) must do it
FROM, STEPS = 150, 360
CAUSE = ("--cause", "backward", "--cause-ms", "40", "--cause-rank", "1", "--cause-from-step", str(FROM))


def _run(tmp_path, collector_factory, job, *extra):
    return _run_job(tmp_path, collector_factory, job, *extra, env=WINDOWS_OFF, steps=STEPS)


def test_slow_work_on_one_rank_is_named_from_phase_times_alone(tmp_path, collector_factory):
    col = _run(tmp_path, collector_factory, "skewed", *CAUSE)
    deadline = time.monotonic() + 10
    while not _stragglers(col, "skewed") and time.monotonic() < deadline:
        time.sleep(0.3)
    (alert,) = _stragglers(col, "skewed")
    assert alert["rank"] == 1, alert
    summary = alert["summary"]
    assert "its own work takes +" in summary and "longer in sync" in summary, summary
    assert FROM <= alert["step"] <= FROM + 150, alert  # the pool turns, the cost is seen, 8 slow blocks of 10
    excess = float(summary.split("its own work takes +")[1].split(" ms")[0])
    waited = float(summary.split("they wait +")[1].split(" ms")[0])
    assert excess > 20 and waited > 20, summary  # 40 ms of extra products; rank 0 waited in gloo
    assert not col.api("/api/jobs/skewed/windows")["ranks"] or all(
        not r["windows"] for r in col.api("/api/jobs/skewed/windows")["ranks"])


def test_the_same_job_without_the_extra_work_raises_nothing(tmp_path, collector_factory):
    col = _run(tmp_path, collector_factory, "balanced")
    time.sleep(1.5)  # evaluation ticks after the last steps
    assert not _stragglers(col, "balanced"), [a["summary"] for a in _stragglers(col, "balanced")]
