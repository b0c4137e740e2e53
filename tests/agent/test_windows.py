"""WindowScheduler with the real torch profiler on CPU and an injected clock."""

from __future__ import annotations

import json
import os

import pytest
import torch

from stepwatch.agent._options import AgentSettings
from stepwatch.core.settings import load
from stepwatch.agent._windows import WindowScheduler


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make(tmp_path, **options):
    """A scheduler on the schedule unless ``windows`` is given (the default is on demand); the
    warm-up session as early as the schedule allows unless ``window_first_after_s`` is given."""
    options.setdefault("windows", "scheduled")
    options.setdefault("window_first_after_s", 0)
    settings = load(AgentSettings, options, environ={})
    out, clock = [], Clock()
    sched = WindowScheduler(out.append, torch, settings, str(tmp_path), clock=clock, wall=clock)
    return sched, out, clock


def run_steps(sched, clock, first, last, step_s=0.01, work=None):
    for step in range(first, last + 1):
        (work or (lambda: torch.ones(64) @ torch.ones(64)))()
        clock.now += step_s
        sched.on_boundary(step, step_s, False)


def windows(out):
    return [r for r in out if r["t"] == "window"]


def test_windows_open_on_global_step_multiples_and_first_is_discarded(tmp_path):
    sched, out, clock = make(tmp_path, window_every_steps=16, overhead_budget=0.9)
    run_steps(sched, clock, 1, 100)
    got = windows(out)
    # No window before 20 baseline steps; then every 16th step: 32, 48, 64, 80, 96; each
    # opens at that boundary, profiles one warm-up step, then records three.
    assert [w["first_step"] for w in got] == [34, 50, 66, 82, 98]
    assert [(w["last_step"] - w["first_step"]) for w in got] == [2, 2, 2, 2, 2]
    assert [w["discard"] for w in got] == [True, False, False, False, False]
    assert all(w["activities"] == "cpu" for w in got)  # no CUDA here
    for w in got:
        trace = json.load(open(w["path"]))
        names = {e.get("name", "") for e in trace["traceEvents"]}
        assert any(n.startswith("ProfilerStep#") for n in names)
    assert sched.windows == 5 and sched.total_cost_s >= 0


def test_on_demand_default_opens_only_asked_windows_and_keeps_the_first(tmp_path):
    settings = load(AgentSettings, {"window_every_steps": 16, "overhead_budget": 0.9}, environ={})
    assert settings.windows == "on_demand"
    out, clock = [], Clock()
    sched = WindowScheduler(out.append, torch, settings, str(tmp_path), clock=clock, wall=clock)
    run_steps(sched, clock, 1, 200)
    assert windows(out) == [] and sched._sessions == 0  # no profiler session on a healthy job
    sched.on_message({"t": "window_now", "reason": "slowdown"})
    run_steps(sched, clock, 201, 260)
    got = windows(out)
    assert [(w["first_step"], w["discard"]) for w in got] == [(203, False)]  # the asked one counts
    sched.request_capture("r1", 2)
    run_steps(sched, clock, 261, 300)
    assert [t["request_id"] for t in out if t["t"] == "trace"] == ["r1"]
    assert len(windows(out)) == 1  # still nothing on the schedule


@pytest.mark.parametrize("raw, mode", [(True, "scheduled"), ("1", "scheduled"), ("scheduled", "scheduled"),
                                       (False, "off"), ("0", "off"), ("off", "off"),
                                       ("on-demand", "on_demand"), ("ON_DEMAND", "on_demand")])
def test_windows_mode_parses_old_booleans_and_names(raw, mode):
    assert load(AgentSettings, {"windows": raw}, environ={}).windows == mode
    assert load(AgentSettings, {}, environ={"STEPWATCH_WINDOWS": str(raw)}).windows == mode


def test_windows_mode_rejects_other_values_naming_the_option():
    with pytest.raises(Exception, match="windows.*on_demand"):
        load(AgentSettings, {"windows": "sometimes"}, environ={})


def test_user_profiler_active_skips_and_counts(tmp_path):
    sched, out, clock = make(tmp_path, window_every_steps=16, overhead_budget=0.9)
    run_steps(sched, clock, 1, 20)
    with torch.profiler.profile():
        run_steps(sched, clock, 21, 66)
    assert windows(out) == []
    assert sched.skips == {"user_profiler": 3}  # steps 32, 48 and 64
    events = [r for r in out if r["t"] == "event" and r["kind"] == "window_skipped"]
    assert len(events) == 3 and "step 32 skipped: user_profiler" in events[0]["message"]


def test_budget_stretches_the_period(tmp_path):
    sched, out, clock = make(tmp_path, window_every_steps=8, overhead_budget=0.01)
    run_steps(sched, clock, 1, 32)
    # 8 steps cannot hold a window (1 warm-up + 3 recorded) twice over: 16 is the floor.
    assert sched.period() == 16
    # The warm-up window (at 32) is slow, 1 s a step: kept apart, it stretches nothing.
    run_steps(sched, clock, 33, 36, step_s=1.0)
    assert sched.period() == 16 and sched.total_cost_s == 0
    assert sched.warmup_cost_s == pytest.approx(4 * 1.0 - 4 * 0.01, rel=0.01)
    run_steps(sched, clock, 37, 48)
    # The next window (at 48) is slow too: each of its boundaries takes 0.2 s, not 0.01 s.
    run_steps(sched, clock, 49, 52, step_s=0.2)
    assert len(windows(out)) == 2
    cost = windows(out)[1]["overhead_s"]
    assert cost == pytest.approx(4 * 0.2 - 4 * 0.01, rel=0.01)
    # cost / (budget * step) = 0.76 / (0.01 * 0.01) = 7600 -> next power of two
    assert sched.period() == 8192


def test_a_one_minute_job_gets_an_analysed_window_despite_a_costly_warm_up(tmp_path):
    """63 s at 40 ms steps with windows every 10 s: the warm-up window (1.5 s of profiler
    start-up) is discarded and does not stretch the period, so a reported window follows."""
    sched, out, clock = make(tmp_path, window_interval_s=10)
    step, slow = 0, set()
    while clock.now - 1000.0 < 63:
        step += 1
        run_steps(sched, clock, step, step, step_s=0.5 if step in slow else 0.04)
        if sched.profiling() and sched.windows == 0 and not slow:
            slow.update(range(step + 1, step + 4))  # the warm-up window's steps are slow
    got = windows(out)
    assert [w["discard"] for w in got][:2] == [True, False], got
    assert sched.overhead_ratio < 0.005 < sched.warmup_cost_s / 63  # the figure the budget governs


def test_the_reported_ratio_never_ends_a_window_above_the_budget(tmp_path):
    """Windows every 64 steps whose real cost (0.12 s each) the 0.5% budget allows only every
    ~24 s: early in the job, when the time since attach is short, a due window waits instead of
    pushing the reported figure over the budget; later windows still come."""
    sched, out, clock = make(tmp_path, window_every_steps=64, overhead_budget=0.005)
    ratios, step = [], 0
    while clock.now - 1000.0 < 120:
        step += 1
        cost_step = sched.profiling() and sched.windows >= 1
        run_steps(sched, clock, step, step, step_s=0.07 if cost_step else 0.04)
        ratios.append(sched.overhead_ratio)
    got = windows(out)
    assert len(got) >= 3 and sched.skips.get("over_budget", 0) >= 1, (len(got), sched.skips)
    assert max(ratios) <= 0.005, max(ratios)


def test_the_warm_up_window_comes_first_at_the_shortest_period(tmp_path):
    """Windows every 10 s at 40 ms steps (period 256): the discarded warm-up window is taken at
    step 32, once the baseline is there, so the first window on the schedule is analysed: at
    step 1,024, the first at which the reported ratio stays under the 0.5% budget (256, 512
    and 768 wait: a window of 4 steps at 40 ms is 0.5% of 32 s)."""
    sched, out, clock = make(tmp_path, window_interval_s=10)
    run_steps(sched, clock, 1, 1100, step_s=0.04)
    got = windows(out)
    assert [(w["first_step"], w["discard"]) for w in got] == [(34, True), (1026, False)], got
    assert sched.skips == {"over_budget": 3}


def test_step_time_is_a_trimmed_mean_of_host_steps(tmp_path):
    """A GPU job's host steps are bimodal (runs ahead, then blocks on a full launch queue): 2 ms
    and 30 ms alternating is 16 ms of wall time per step (the median said 2 or 30); one pause of
    20 s among 64 steps is trimmed away."""
    sched, _, clock = make(tmp_path, window_interval_s=10)
    for step in range(1, 65):
        s = 20.0 if step == 40 else (0.002 if step % 2 else 0.030)
        clock.now += s
        sched.on_boundary(step, s, False)
    assert sched._step_s() == pytest.approx(0.016, rel=0.05)


def test_interval_sets_the_period_from_step_time(tmp_path):
    sched, _, clock = make(tmp_path, window_interval_s=60)
    run_steps(sched, clock, 1, 30, step_s=0.035)
    assert sched.period() == 2048  # 60 s / 35 ms = 1714 -> 2048 steps (72 s)


def test_capture_on_command_writes_a_trace(tmp_path):
    sched, out, clock = make(tmp_path, windows=False)
    run_steps(sched, clock, 1, 3)
    sched.on_message({"t": "capture", "request_id": "req-1", "steps": 2})
    run_steps(sched, clock, 4, 10)
    traces = [r for r in out if r["t"] == "trace"]
    assert len(traces) == 1
    t = traces[0]
    assert t["request_id"] == "req-1" and t["error"] == "" and os.path.getsize(t["path"]) > 0
    # Opened at boundary 4: step 5 is the profiler's warm-up, steps 6..7 are recorded.
    assert (t["first_step"], t["last_step"]) == (6, 7)


def test_an_early_costly_capture_is_the_warm_up_and_does_not_starve_windows(tmp_path):
    """A capture asked for before any window (an alert early in a job) pays the profiler's
    start-up: kept apart like a warm-up window, and captures never set the window spacing,
    so the scheduled windows still come (on a GPU a 63 s job got none before)."""
    sched, out, clock = make(tmp_path, window_every_steps=64, overhead_budget=0.005)
    run_steps(sched, clock, 1, 30, step_s=0.015)
    sched.on_message({"t": "capture", "request_id": "alert-1", "steps": 5})
    run_steps(sched, clock, 31, 37, step_s=0.3)  # the capture's steps: 2 s of start-up and export
    assert sched.warmup_cost_s > 1.5 and sched.total_cost_s == 0
    run_steps(sched, clock, 38, 4000, step_s=0.015)
    assert len(windows(out)) >= 3 and sched.overhead_ratio <= 0.005


def test_captures_beyond_the_capture_budget_are_refused_with_the_reason(tmp_path):
    """A capture costs what it costs (it is asked for), but once profiling has cost more than
    capture_budget of the time since attach the next one is refused, and the reply says so."""
    sched, out, clock = make(tmp_path, windows=False, capture_budget=0.02)
    run_steps(sched, clock, 1, 5)
    sched.on_message({"t": "capture", "request_id": "first", "steps": 2})  # the warm-up session
    run_steps(sched, clock, 6, 12)
    sched.on_message({"t": "capture", "request_id": "second", "steps": 2})
    run_steps(sched, clock, 13, 20, step_s=0.5)  # slow profiled steps: a costly capture
    assert sched.overhead_ratio > 0.02
    sched.on_message({"t": "capture", "request_id": "third", "steps": 2})
    run_steps(sched, clock, 21, 25)
    traces = {r["request_id"]: r for r in out if r["t"] == "trace"}
    assert traces["first"]["error"] == "" and traces["second"]["error"] == ""
    assert traces["third"]["path"] == "" and traces["third"]["error"].startswith("refused: profiling has cost")
    assert "above capture_budget 2.0%" in traces["third"]["error"]


def test_zero_gpu_events_backs_off(tmp_path):
    sched, out, clock = make(tmp_path, window_every_steps=16, overhead_budget=0.9,
                             window_backoff_s=100)
    sched._cuda_windows.add(7)  # as if window 7 had asked for CUDA activity
    sched.on_message({"t": "window_result", "window_id": 7, "gpu_event_count": 0})
    run_steps(sched, clock, 1, 50)
    assert windows(out) == [] and sched.skips == {"no_gpu_events_backoff": 2}  # 32, 48
    clock.now += 100
    run_steps(sched, clock, 51, 70)
    assert len(windows(out)) == 1


def test_a_window_that_leaves_the_job_slower_makes_the_agent_back_off(tmp_path):
    """A test hook for the after-effect: from the end of a window on, steps take 5% longer.
    The check (25 s before the window, two 25 s spans after it) finds it: the event says so,
    the ratio is exported, the measured spell counts in the overhead ratio. The windows here
    are CPU-only (no CUDA), so dropping CUDA activity would change nothing: profiling goes off
    at once and a capture is refused with the reason. A window after which nothing changed is
    no finding."""
    sched, out, clock = make(tmp_path, window_every_steps=8192, overhead_budget=0.9)
    run_steps(sched, clock, 1, 8196)  # the warm-up window at 32, the window at 8192 closes at 8196
    assert len(windows(out)) == 2
    run_steps(sched, clock, 8197, 16383)  # nothing changed after it: no finding
    assert sched.aftereffects == 0 and 0.98 < sched.aftereffect_ratio < 1.02
    cost_before = sched.total_cost_s
    run_steps(sched, clock, 16384, 16388)  # the window at 16384
    run_steps(sched, clock, 16389, 24575, step_s=0.0105)  # 5% slower from its end on
    events = [r for r in out if r["t"] == "event" and r["kind"] == "window_aftereffect"]
    assert len(events) == 1 and "+5.0% slower per step" in events[0]["message"], events
    assert "a profiler session (cpu)" in events[0]["message"]
    assert "profiling is off in this process" in events[0]["message"], events
    assert sched.aftereffect_ratio == pytest.approx(1.05, abs=0.005)
    assert sched.total_cost_s == cost_before + windows(out)[-1]["overhead_s"]  # the windows' own cost
    lasting = sched.lasting_cost_s
    # counted from the session's close (step 16,388) to now, not only the 50 s of the check
    assert lasting == pytest.approx((1 - 1 / 1.05) * (24575 - 16388) * 0.0105, rel=0.02)
    n = len(windows(out))
    run_steps(sched, clock, 24576, 40000, step_s=0.0105)
    assert len(windows(out)) == n  # no window while off
    # the share a session left goes on counting while profiling is off: 15,425 more steps
    assert sched.lasting_cost_s - lasting == pytest.approx(15425 * 0.0105 * (1 - 1 / 1.05), rel=0.01)
    sched.on_message({"t": "capture", "request_id": "asked", "steps": 2})
    run_steps(sched, clock, 40001, 40003, step_s=0.0105)
    (trace,) = [r for r in out if r["t"] == "trace"]
    assert trace["path"] == "" and trace["error"].startswith("refused: a profiler session left this job slower")


def test_back_off_drops_cuda_activity_first_then_profiling(tmp_path):
    """With CUDA in the sessions the first finding drops CUDA activity, a second one (of a
    CPU-only session) turns profiling off; the retry after 6 h steps back up one level."""
    sched, out, clock = make(tmp_path)
    assert sched._levels == ["cpu,cuda", "cpu", "off"]
    sched._aftereffect("cpu,cuda", 1.05, True, clock())
    sched._aftereffect("cpu", 1.04, True, clock())
    messages = [r["message"] for r in out if r["t"] == "event" and r["kind"] == "window_aftereffect"]
    assert "windows now take cpu activity only" in messages[0]
    assert "profiling is off in this process" in messages[1]
    clock.now += 6 * 3600
    sched.on_boundary(1, 0.01, False)
    assert sched._levels[sched._level] == "cpu"


def test_compile_health_counts_graph_breaks_and_new_graphs_between_windows(tmp_path):
    import torch._dynamo

    sched, out, clock = make(tmp_path, window_every_steps=32, overhead_budget=0.9)

    @torch.compile(backend="eager")
    def fn(x):
        y = x * 2
        print("", end="")  # a graph break
        return y + 1

    run_steps(sched, clock, 1, 36, work=lambda: fn(torch.ones(4)))  # first window at 32
    run_steps(sched, clock, 37, 68, work=lambda: fn(torch.ones(4)))  # same shapes: nothing new
    run_steps(sched, clock, 69, 100, work=lambda: fn(torch.ones(4, 3)))  # new shape: recompile
    got = windows(out)
    assert len(got) == 3
    assert got[0]["graph_breaks"] >= 1 and got[0]["recompiles"] >= 1
    assert (got[1]["graph_breaks"], got[1]["recompiles"]) == (0, 0)
    assert got[2]["recompiles"] >= 1


def test_a_long_interval_leaves_the_warm_up_session_alone(tmp_path):
    """window_interval_s of a day: the warm-up session still comes early (at the shortest
    period), and no window after it in a job of 40 s; the device A/B's ``warmonly`` arm relies on
    this to measure one profiler session's lasting cost."""
    sched, out, clock = make(tmp_path, window_interval_s=86400, overhead_budget=0.9)
    run_steps(sched, clock, 1, 4000, work=lambda: None)
    got = windows(out)
    assert [(w["first_step"], w["discard"]) for w in got] == [(34, True)]
    assert sched.period() >= 86400 / 0.01


def test_export_off_runs_and_times_windows_but_writes_and_sends_none(tmp_path):
    """window_export off (an A/B arm measuring the export's own cost): the same windows open at
    the same steps and are costed, no trace file is written and no window record is sent;
    a capture asked for is still exported."""
    on, out_on, clock_on = make(tmp_path / "on", window_every_steps=16, overhead_budget=0.9)
    off, out_off, clock_off = make(tmp_path / "off", window_every_steps=16, overhead_budget=0.9,
                                   window_export=False)
    for d in ("on", "off"):
        (tmp_path / d).mkdir()
    run_steps(on, clock_on, 1, 100)
    run_steps(off, clock_off, 1, 100)
    assert len(windows(out_on)) == 5 and on.windows == 5
    assert windows(out_off) == [] and off.windows == 5 and off._sessions == 5
    assert sorted(os.listdir(tmp_path / "off")) == []
    assert len(os.listdir(tmp_path / "on")) == 5
    off.request_capture("r1", 2)
    run_steps(off, clock_off, 101, 140)
    traces = [t for t in out_off if t["t"] == "trace"]
    assert [t["request_id"] for t in traces] == ["r1"] and traces[0]["error"] == ""
    assert os.path.exists(traces[0]["path"])


def test_export_option_reads_the_environment():
    assert load(AgentSettings, {}, environ={"STEPWATCH_WINDOW_EXPORT": "0"}).window_export is False
    assert load(AgentSettings, {}, environ={}).window_export is True
    with pytest.raises(ValueError, match="STEPWATCH_WINDOW_EXPORT|window_export"):
        load(AgentSettings, {}, environ={"STEPWATCH_WINDOW_EXPORT": "maybe"})


@pytest.mark.parametrize("ask", ["capture", "window_now"])
def test_a_session_asked_for_gets_no_after_effect_verdict(tmp_path, ask):
    """Sessions the collector asks for (a trace capture for an alert or `stepwatch trace`, a
    slowdown alert's WindowNow) come because the job already slowed: the after-effect check's
    "before" would hold part of that change, so they get no verdict. Steps 5% slower from the
    asked session's end on (as a slowdown that began just before it looks) leave profiling on;
    the same 5% after a scheduled window is found (test above)."""
    sched, out, clock = make(tmp_path, windows="on_demand", overhead_budget=0.9)
    run_steps(sched, clock, 1, 3000)
    assert sched._sessions == 0
    if ask == "capture":
        sched.on_message({"t": "capture", "request_id": "alert-1", "steps": 3})
    else:
        sched.on_message({"t": "window_now", "reason": "slowdown"})
    run_steps(sched, clock, 3001, 3010)
    assert sched._sessions == 1
    run_steps(sched, clock, 3011, 12000, step_s=0.0105)  # 5% slower from its end on
    events = [r for r in out if r["t"] == "event" and r["kind"] == "window_aftereffect"]
    assert events == [] and sched.aftereffects == 0
    sched.on_message({"t": "capture", "request_id": "later", "steps": 2})
    run_steps(sched, clock, 12001, 12005, step_s=0.0105)
    (later,) = [r for r in out if r["t"] == "trace" and r["request_id"] == "later"]
    assert later["path"] and not later.get("error"), later


def test_the_first_scheduled_session_waits_to_be_judged_and_a_lasting_cost_is_reported_for_good(tmp_path):
    """At the default window_first_after_s (60 s) the warm-up session waits until the job has
    run 60 s, so the after-effect check has the job's level before any profiler ran; a session
    that left every later step 4% slower is then found, and from then on the overhead ratio
    carries that share of each step, not only the time inside windows."""
    sched, out, clock = make(tmp_path, window_first_after_s=60, window_every_steps=1 << 20)
    run_steps(sched, clock, 1, 5999)  # 60 s of 10 ms steps
    assert windows(out) == [] and not sched.profiling()
    run_steps(sched, clock, 6000, 6024)  # the first session: the first multiple of 16 after 60 s
    (first,) = windows(out)
    assert first["first_step"] == 6018 and first["discard"], first
    run_steps(sched, clock, 6025, 20000, step_s=0.0104)  # 4% slower from its end, for good
    (event,) = [r for r in out if r["t"] == "event" and r["kind"] == "window_aftereffect"]
    assert "+4.0% slower per step" in event["message"], event
    share = 1 - 1 / 1.04
    since_session = clock.now - 1000.0 - 60.2
    assert sched.lasting_cost_s == pytest.approx(share * since_session, rel=0.02)
    assert sched.overhead_ratio > 0.9 * share * since_session / (clock.now - 1000.0)
