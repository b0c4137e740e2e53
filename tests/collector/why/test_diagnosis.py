"""Diagnosis: what changed between before and after an onset, ranked by ms per step."""

from __future__ import annotations

import statistics

from hypothesis import given, settings, strategies as st

from collector_testlib import columns
from stepwatch.collector.why import Evidence, diagnose
from stepwatch.proto.stepwatch.v1 import agent_pb2

T0 = 1_700_000_000.0
HELLO = agent_pb2.Hello(job="j", rank=3)


def window(wid, t, backward_ms, kernel_ms, other_ms=5.0, kernel="ampere_bf16_gemm"):
    w = agent_pb2.WindowSummary(window_id=wid, first_step=wid * 100, last_step=wid * 100 + 2, start_time_s=t)
    w.breakdown.CopyFrom(agent_pb2.StepBreakdown(
        step_time_s=(10 + backward_ms + 3 + other_ms) / 1e3, forward_s=0.010, backward_s=backward_ms / 1e3,
        optimizer_s=0.003, other_s=other_ms / 1e3))
    w.top_kernels.add(name=kernel, seconds=3 * kernel_ms / 1e3, count=30)  # 3 steps
    w.top_kernels.add(name="elementwise", seconds=3 * 0.002, count=300)
    return w


def feed(ev, onset_step=500, extra_ms=0.0, wait_extra_ms=0.0, sm_after=1.98e9, windows=(), cpu_extra_ms=0.0,
         tensor=None, device_calls=(0.0, 0.0)):
    """600 steps of 40 ms; from onset_step on, extra_ms more and wait_extra_ms more wait;
    ``device_calls``: the allocator's cudaMalloc (and as many cudaFree) calls per step before
    and after onset_step."""
    for first in range(1, 601, 20):
        b = agent_pb2.Batch(seq=first)
        for s in range(first, first + 20):
            slow = s >= onset_step
            b.steps.add(step=s, end_time_s=T0 + s * 0.04, duration_s=0.040 + (extra_ms + wait_extra_ms) / 1e3 * slow,
                        dataloader_wait_s=0.001 + wait_extra_ms / 1e3 * slow)
        t = T0 + first * 0.04
        g = b.gpu_samples.add(time_s=t, sm_clock_hertz=sm_after if first >= onset_step else 1.98e9)
        if tensor is not None:  # GPM: (before, after) tensor activity; SM activity 0.9 throughout
            g.tensor_active_ratio, g.sm_active_ratio = tensor[first >= onset_step], 0.9
        b.host.add(time_s=t, cpu_seconds=first * 0.04 + max(0, first - onset_step) * cpu_extra_ms / 1e3)
        calls = int(min(first, onset_step) * device_calls[0] + max(0, first - onset_step) * device_calls[1])
        b.allocator.add(time_s=t, device_allocs=100 + calls, device_frees=calls)
        b.windows.extend(w for w in windows if first <= w.first_step < first + 20)
        ev.on_batch(HELLO, b, t, *columns(b))


def test_allocator_churn_is_named_first_and_a_steady_allocator_is_not_mentioned():
    ev = Evidence()
    feed(ev, extra_ms=6.0, cpu_extra_ms=6.0, device_calls=(0.0, 12.0))
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert d.text.startswith("allocator churn: cudaMalloc/cudaFree 0.0 -> 24.0 per step"), d.text
    calm = Evidence()
    feed(calm, extra_ms=6.0, cpu_extra_ms=6.0, device_calls=(0.5, 0.6))
    d = diagnose(calm.rank("j", 3), T0 + 500 * 0.04)
    assert "allocator churn" not in d.text and d.text.startswith("host CPU"), d.text


def test_backward_change_is_named_with_its_kernel():
    ev = Evidence()
    feed(ev, extra_ms=4.0, windows=[window(2, T0 + 200 * 0.04, 8.0, 3.0), window(5, T0 + 500 * 0.04, 12.0, 6.9)])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert d.complete and abs(d.step_delta_ms - 4.0) < 0.01
    assert d.text.startswith("backward +4.0 ms/step (ampere_bf16_gemm +3.9 ms)"), d.text
    assert "data-loader wait +0.0 ms/step" in d.text and "clocks unchanged" in d.text


def test_data_loader_wait_leads_when_it_is_the_cause():
    ev = Evidence()
    feed(ev, wait_extra_ms=6.0, windows=[window(2, T0 + 8, 8.0, 3.0), window(5, T0 + 20, 8.0, 3.0, other_ms=11.0)])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert d.text.startswith("data-loader wait +6.0 ms/step"), d.text


def test_without_a_window_after_the_onset_it_says_so_and_clocks_are_reported():
    ev = Evidence()
    feed(ev, extra_ms=5.0, sm_after=1.41e9, windows=[window(2, T0 + 8, 8.0, 3.0)])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert not d.complete
    assert "no measured contributor explains the +5.0 ms/step" in d.text, d.text
    assert "SM clock 1.98 -> 1.41 GHz" in d.text and "no profiler window after the onset yet" in d.text


def test_a_step_that_did_not_grow_is_said_so_not_left_unexplained():
    """A why read where the median step has not grown (a floor detector's raise, or the steps
    after the onset not yet up) says so, never "no measured contributor explains the -0.0
    ms/step" beside an alert of +8%."""
    ev = Evidence()
    feed(ev, extra_ms=0.0, windows=[window(2, T0 + 8, 8.0, 3.0)])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert not d.explained and abs(d.step_delta_ms) < 0.05, (d.explained, d.step_delta_ms)
    assert d.text.startswith("the median step not grown since the onset (") and "no measured contributor" not in d.text, d.text


def test_gpm_activity_that_moved_is_reported_and_unchanged_activity_is_not():
    ev = Evidence()
    feed(ev, extra_ms=5.0, tensor=(0.78, 0.61), windows=[window(2, T0 + 8, 8.0, 3.0)])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert "tensor activity 78% -> 61%" in d.text and "SM activity" not in d.text, d.text


def test_no_step_data_on_both_sides_gives_no_diagnosis():
    ev = Evidence()
    feed(ev, extra_ms=5.0)
    assert diagnose(ev.rank("j", 3), T0 + 10_000) is None
    assert diagnose(ev.rank("j", 9), T0) is None
    ev.forget([("j", 3)])
    assert ev.rank("j", 3) is None


def test_host_cpu_spent_waiting_for_a_busier_gpu_is_not_the_cause():
    # Extra GEMMs in backward: the GPU is busier by ~6 ms a step, and a host that syncs every
    # step (loss.item()) spins 6 ms more: host CPU is the wait, backward is the cause.
    ev = Evidence()
    wb, wa = window(2, T0 + 200 * 0.04, 8.0, 3.0), window(5, T0 + 500 * 0.04, 10.7, 9.0)
    for w, busy in ((wb, 0.5), (wa, 0.62)):
        w.gpu_event_count, w.span_s, w.gpu_busy_ratio = 500, 3 * w.breakdown.step_time_s, busy
    feed(ev, extra_ms=6.0, windows=[wb, wa], cpu_extra_ms=6.6)
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    # (the phase grew less than its kernels: they filled GPU idle time; ranked by the phase)
    assert d.text.startswith("backward +2.7 ms/step (ampere_bf16_gemm +6.0 ms)"), d.text
    assert "host CPU +1.8 ms/step (after 4.8 ms of waiting for the GPU)" in d.text, d.text


def test_gpu_work_that_filled_idle_time_names_its_phase():
    """Profiled steps are slower on the host: extra GEMMs queued in backward fill GPU idle time
    that backward was already charged for, so its wall share moves little (here +0.3 ms) while
    its GPU work grows by the GEMMs (+6 ms, as measured on the H100 with bench/phase_attribution.py)."""
    ev = Evidence()
    wb, wa = window(2, T0 + 200 * 0.04, 14.1, 3.0), window(5, T0 + 500 * 0.04, 14.4, 9.1, other_ms=3.0)
    for w, bwd_gpu in ((wb, 6.7), (wa, 12.8)):
        w.gpu_event_count = 1000
        w.breakdown.forward_gpu_s, w.breakdown.backward_gpu_s, w.breakdown.optimizer_gpu_s = 0.0031, bwd_gpu / 1e3, 0.0004
    feed(ev, extra_ms=6.0, windows=[wb, wa])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert d.text.startswith("backward +6.1 ms/step (GPU work, ampere_bf16_gemm +6.1 ms)"), d.text
    forward = [c for c in d.contributors if c[0] == "forward"]
    assert forward and abs(forward[0][1]) < 0.05 and forward[0][2] == "", "an unchanged phase is not tagged"


def test_windows_from_before_an_old_onset_are_kept():
    """A window every 14 steps for 600 steps (40 windows) and an onset at step 100: the
    newest 8 are kept whole, older ones thinned, and one from before the onset is still there
    (the newest 16 alone start at step 336)."""
    ev = Evidence()
    windows = [window(w, T0 + (w * 14 - 12) * 0.04, 8.0 if w * 14 - 12 < 100 else 12.0, 3.0) for w in range(1, 41)]
    for w in windows:
        w.first_step, w.last_step = w.window_id * 14 - 12, w.window_id * 14 - 10
    feed(ev, onset_step=100, extra_ms=4.0, windows=windows)
    kept = ev.rank("j", 3).windows
    assert len(kept) == 16 and [w.window_id for w in kept[-8:]] == list(range(33, 41))
    d = diagnose(ev.rank("j", 3), T0 + 100 * 0.04)
    assert d.complete and d.text.startswith("backward +4.0 ms/step"), d.text


def test_no_window_from_before_the_onset_is_said_as_such():
    ev = Evidence()
    feed(ev, extra_ms=5.0, windows=[window(5, T0 + 21, 12.0, 3.0)])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert not d.complete and "no profiler window from before the onset" in d.text, d.text


def test_a_phase_delayed_by_gpu_work_launched_in_another_is_not_the_cause():
    """GEMMs queued in forward (its GPU work +2.0 ms) run while the host is in backward and
    delay backward's kernels: backward's wall share grows +2.5 ms with no GPU work of its own
    (the H100 diagnosis backtest, forward at 2 ms). Forward is named; backward keeps 0.5 ms."""
    ev = Evidence()
    wb, wa = window(2, T0 + 200 * 0.04, 8.0, 3.0), window(5, T0 + 500 * 0.04, 10.5, 5.0)
    for w, fwd_gpu in ((wb, 3.1), (wa, 5.1)):
        w.gpu_event_count = 1000
        w.breakdown.forward_gpu_s, w.breakdown.backward_gpu_s, w.breakdown.optimizer_gpu_s = fwd_gpu / 1e3, 0.0067, 0.0004
    feed(ev, extra_ms=2.0, windows=[wb, wa])
    d = diagnose(ev.rank("j", 3), T0 + 500 * 0.04)
    assert d.text.startswith("forward +2.0 ms/step (GPU work, ampere_bf16_gemm +2.0 ms)"), d.text
    assert "backward +0.5 ms/step (after 2.0 ms of delay by other phases' GPU work)" in d.text, d.text


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.tuples(st.floats(-0.01, 0.2), st.floats(-0.01, 0.05), st.booleans(),
                                   st.integers(1, 3)),
                         min_size=1, max_size=27), min_size=1, max_size=8), st.sampled_from([10, 4, 25]))
def test_step_blocks_are_cut_by_step_number_as_the_straggler_rule_cuts_them(batches, size):
    """The evidence's blocks are ``step // block`` (the straggler rule's block_steps; 10 by
    default), whatever the batch boundaries and gaps in the step numbers: (first step, last
    step, end time, median step time, mean wait without its largest, negatives as 0) of the
    block's non-profiled steps with a positive step time, a block with fewer than half ``block``
    of those left out; the newest block stays open."""
    ev, usable, step = Evidence(size), [], 0
    for seq, rows in enumerate(batches, 1):
        b = agent_pb2.Batch(seq=seq)
        for dur, wait, profiled, gap in rows:
            step += gap
            b.steps.add(step=step, end_time_s=T0 + step, duration_s=dur, dataloader_wait_s=wait, profiled=profiled)
            if not profiled and dur > 0:
                usable.append((step, T0 + step, dur, max(wait, 0.0)))
        ev.on_batch(HELLO, b, T0, *columns(b))
    blocks: dict = {}
    for row in usable:
        blocks.setdefault(row[0] // size, []).append(row)
    newest = max(blocks, default=None)

    def trimmed(xs):
        return sum(xs) / len(xs) if len(xs) < 3 else (sum(xs) - max(xs)) / (len(xs) - 1)

    want = [(blk[0][0], blk[-1][0], blk[-1][1], statistics.median(r[2] for r in blk), trimmed([r[3] for r in blk]))
            for bid, blk in sorted(blocks.items()) if bid != newest and len(blk) * 2 >= size]
    r = ev.rank("j", 3)
    got = list(r.blocks)
    assert [g[:4] for g in got] == [w[:4] for w in want]
    assert all(abs(g[4] - w[4]) < 1e-12 for g, w in zip(got, want))
    assert len(r.pending[0]) == len(blocks.get(newest, []))


def test_the_detection_cuts_the_evidence_with_the_straggler_rules_block():
    from stepwatch.collector.alerting._detection import Detection
    from stepwatch.collector.detect import parse_detection

    assert Detection(parse_detection({}), log_changes=False).evidence.block == 10
    assert Detection(parse_detection({"straggler": {"block_steps": 25}}), log_changes=False).evidence.block == 25


def test_what_no_profiler_window_makes_is_churn_tensor_work_or_a_loader_wait_that_explains_the_change():
    from stepwatch.collector.alerting._detection import _no_window_makes
    from stepwatch.collector.why import Diagnosis

    churn = Diagnosis("allocator churn: cudaMalloc/cudaFree 0.0 -> 42.1 per step (the cache ...); host CPU +10.6 ms/step",
                      (("host CPU", 10.6, ""),), 6.0, True, "allocator churn: cudaMalloc/cudaFree 0.0 -> 42.1 per step")
    assert _no_window_makes(churn) == "allocator churn: cudaMalloc/cudaFree 0.0 -> 42.1 per step"
    loader = Diagnosis("data +3.5 ms/step (...)", (("data", 3.5, "data-loader wait +4.7 ms"),), 6.0, True)
    assert _no_window_makes(loader) == "a longer data-loader wait (data +3.5 ms/step)"
    small = Diagnosis("data +1.0 ms/step (...)", (("data", 1.0, "data-loader wait +1.2 ms"),), 6.0, True)
    gemm = Diagnosis("forward +6.0 ms/step", (("forward", 6.0, "host-bound: its host time +5.1 ms"),), 6.0, True)
    assert _no_window_makes(small) == "" and _no_window_makes(gemm) == ""  # the profiler's own cost stays so
    # more tensor work on the device: a profiler adds none (SM activity alone can rise with
    # slower kernels, so it does not count)
    tensor = Diagnosis("backward +5.9 ms/step", (("backward", 5.9, ""),), 5.0, True, "",
                       ("tensor activity 16% -> 22%",))
    assert _no_window_makes(tensor) == "more tensor work on the device (tensor activity 16% -> 22%)"
    sm = Diagnosis("backward +5.9 ms/step", (("backward", 5.9, ""),), 5.0, True, "", ("SM activity 50% -> 61%",))
    assert _no_window_makes(sm) == ""


def test_a_change_that_grows_in_is_compared_with_the_level_before_it_and_a_busier_device_is_not_host_bound():
    """The real H100 job with GEMMs at the top of backward (tests/data/real/diag): the change grew
    in over 30 s, and the drift onset is dated up to 23 s after it began. The guard band ahead of the onset keeps
    the grown-in blocks out of "before", and the device's tensor activity rose, so the host's
    longer launches are its wait on a full queue, not a cause."""
    import pathlib

    from stepwatch.collector._replay import replay
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, load

    path = pathlib.Path(__file__).resolve().parents[2] / "data" / "real" / "diag" / "h100h_1gpu_m_gemm_backward.jsonl.gz"
    drift = [a for a in replay(events(load(str(path))), DetectionConfig()) if a.alertname == "StepwatchThroughputDrift"]
    # (the change began at step 3,950 and grew over 30 s: the 10th percentiles' warning, held by
    # backward's device time 4.6 of its spreads out, dates it at 4,015; the medians' critical,
    # whose backward its host paced, at 4,432, 23 s after the change)
    assert len(drift) == 1 and drift[0].step is not None and 3950 <= drift[0].step <= 4432, \
        [(a.step, a.fired_summary) for a in drift]
    why = drift[0].diagnosis
    assert why.startswith("backward +") and float(why.split("+")[1].split(" ")[0]) >= 4.0, why
    assert "host-bound" not in why, why
    assert "host CPU +" in why and "ms/step (the host waiting for the device, not a cause)" in why, why


def test_a_host_slower_in_every_phase_alike_is_named_as_the_host():
    """Host-bound phases that grew by like shares of their own time, none holding most of it,
    become one "host" contributor; one phase that holds most of it, or shares far apart, stay
    the phases (a slow data loader, GEMMs in forward). A short phase's share (under a tenth of
    the phases' time) is left out of the evenness when two longer ones remain."""
    from stepwatch.collector.why._explain import _host_slower

    hb = "host-bound: its host time +1.0 ms"
    alike = [("backward", 1.0, hb), ("forward", 0.6, hb), ("optimizer", 0.2, hb), ("sync", 0.0, "")]
    shares = {"backward": (0.18, 0.0056), "forward": (0.14, 0.0043), "optimizer": (0.18, 0.0011)}
    got = _host_slower(alike, shares, 0.012)
    assert got[0][0] == "host" and abs(got[0][1] - 1.8) < 1e-9, got
    assert "backward +1.0, forward +0.6, optimizer +0.2 ms/step" in got[0][2] and got[1:] == [alike[3]], got
    assert _host_slower(alike, dict(shares, forward=(0.05, 0.0043)), 0.012) == alike  # shares 3.6x apart
    # the optimizer's 1.1 ms of 12 ms grew by 3x the others' share: its share is left out ...
    assert _host_slower(alike, dict(shares, optimizer=(0.55, 0.0011)), 0.012)[0][0] == "host"
    # ... not when every phase is long enough to count (here: no phase time given)
    assert _host_slower(alike, dict(shares, optimizer=(0.55, 0.0011)), 0.0) == alike
    one = [("forward", 7.3, hb), ("data", 0.2, hb)]
    assert _host_slower(one, {"forward": (0.49, 0.015), "data": (0.5, 0.001)}, 0.03) == one  # forward holds 97%
    unbound = alike[:2] + [("optimizer", 1.0, "")]
    assert _host_slower(unbound, {"backward": (0.18, 0.0056), "forward": (0.14, 0.0043)}, 0.012) == unbound


def test_block_medians_weigh_each_row_by_the_steps_it_holds():
    """Merged old rows hold 200 steps, recent ones 10: five slow merged rows (1,000 steps at
    11.5 ms) and sixty fast recent ones (600 steps at 10.0 ms) have the slow median; an
    equal-weight median of the 65 rows would say 10.0."""
    from stepwatch.collector.why._explain import _step_median
    old = [(k * 200, k * 200 + 199, T0 + k, 0.0115, 0.0) for k in range(5)]
    recent = [(1000 + k * 10, 1009 + k * 10, T0 + 10 + k, 0.0100, 0.0) for k in range(60)]
    assert statistics.median(r[3] for r in old + recent) == 0.0100
    assert _step_median(old + recent, 3) == 0.0115
    # halves that meet between two values: their mean, as statistics.median
    assert _step_median([(0, 9, T0, 1.0, 0.0), (10, 19, T0, 3.0, 0.0)], 3) == 2.0
    assert _step_median([], 3) is None


def test_a_few_seconds_of_steps_after_a_restart_are_not_read_as_the_level_before():
    """The alert compares with the job's settled level (``reference``) from before all the steps
    the rings hold (the collector restarted since): with under ``_MIN_BEFORE_S`` of steps before
    the onset, no why is made (a live H200 job's +22% read "no measured contributor explains the
    -0.1 ms/step" so); with the reference inside the rings, or none, the same change is
    diagnosed."""
    ev = Evidence()
    feed(ev, onset_step=150, extra_ms=6.0, cpu_extra_ms=6.0)  # (the first 6 s of steps before the onset)
    since = T0 + 150 * 0.04
    assert diagnose(ev.rank("j", 3), since, reference=(T0 - 600.0, T0 - 480.0)) is None
    d = diagnose(ev.rank("j", 3), since)
    assert d is not None and d.step_delta_ms > 5.0, d
    d = diagnose(ev.rank("j", 3), since, reference=(T0, T0 + 4.0))
    assert d is not None and d.step_delta_ms > 5.0, d
