"""Diagnosis from the agents' always-on phase times: the phase that grew is named, with no
profiler window; the host is named only when it did more work, never for waiting."""

from __future__ import annotations

from collector_testlib import columns
from stepwatch.collector.why import Evidence, diagnose
from stepwatch.proto.stepwatch.v1 import agent_pb2

T0 = 1_700_000_000.0
HELLO = agent_pb2.Hello(job="j", rank=1)
BASE = {"data": 1.0, "forward": 12.0, "backward": 22.0, "sync": 1.0, "optimizer": 4.0}  # ms, 40 ms
HOST = {"data": 1.0, "forward": 3.0, "backward": 2.0, "sync": 0.2, "optimizer": 1.0}    # ms: runs ahead


def feed(ev, device_extra=None, host_extra=None, wait_extra_ms=0.0, cpu_extra_ms=0.0, points=0b1111,
         onset_step=500, every=1, clock=agent_pb2.STEP_CLOCK_CUDA_EVENT, phases_from=0, steps=600):
    """``steps`` steps; from ``onset_step`` on, the phases of ``device_extra`` / ``host_extra`` (ms)
    longer; phase times on every ``every``-th step from ``phases_from`` on."""
    device_extra, host_extra = device_extra or {}, host_extra or {}
    for first in range(1, steps + 1, 20):
        b = agent_pb2.Batch(seq=first)
        for s in range(first, first + 20):
            slow = s >= onset_step
            dev = {p: v + device_extra.get(p, 0.0) * slow for p, v in BASE.items()}
            host = {p: v + host_extra.get(p, 0.0) * slow for p, v in HOST.items()}
            end = T0 + s * 0.04
            if s % every == 0 and s >= phases_from:
                b.phase_times.add(step=s, end_time_s=end, points=points, clock=clock,
                                  **{f"{p}_s": v / 1e3 for p, v in dev.items()},
                                  **{f"host_{p}_s": v / 1e3 for p, v in host.items()})
            b.steps.add(step=s, end_time_s=end, duration_s=sum(dev.values()) / 1e3,
                        dataloader_wait_s=0.001 + wait_extra_ms / 1e3 * slow)
        t = T0 + first * 0.04
        b.host.add(time_s=t, cpu_seconds=first * 0.04 + max(0, first - onset_step) * cpu_extra_ms / 1e3)
        ev.on_batch(HELLO, b, t, *columns(b))


def test_gpu_work_in_backward_is_named_and_the_spinning_host_is_not():
    ev = Evidence()
    feed(ev, device_extra={"backward": 5.0}, cpu_extra_ms=5.0)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("backward +5.0 ms/step; "), d.text
    assert "host CPU +5.0 ms/step (the host waiting for the device, not a cause)" in d.text, d.text
    assert "no profiler window" not in d.text and "host-bound" not in d.text


def test_a_host_bound_forward_names_the_host():
    """Launch-bound: the forward's host time grew as much as its device time and is as long."""
    ev = Evidence()
    feed(ev, device_extra={"forward": 4.0}, host_extra={"forward": 13.0}, cpu_extra_ms=4.0)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("forward +4.0 ms/step (host-bound: its host time +13.0 ms);"), d.text
    assert "host CPU +4.0 ms/step (in the host-bound phases)" in d.text, d.text
    assert all(c[0] != "host CPU" for c in d.contributors), d.contributors  # a note, never a cause of its own


def test_the_host_blocking_before_the_optimizer_is_named_as_that_wait():
    """A synchronize (or .item(), or a copy to the host) after backward: the host's time in the
    sync gap grows by the backward it now waits for, the device's does not, and the optimizer's
    device time grows as its launches start late (real H100/H200 jobs: host +6.4..9.1 ms, the
    optimizer +1.2..1.9 ms)."""
    ev = Evidence()
    feed(ev, device_extra={"optimizer": 1.5}, host_extra={"sync": 8.0}, cpu_extra_ms=1.0)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("sync +1.5 ms/step (the host now waits for the device before the optimizer step "
                             "(its host time here +8.0 ms"), d.text
    assert all(c[0] != "optimizer" for c in d.contributors), d.contributors  # counted with the wait


def test_a_host_wait_with_an_optimizer_that_grew_on_the_host_too_is_not_the_wait():
    """The optimizer's own host time grew as much as its device time: it is the optimizer's
    work (a for-loop implementation), named there; the sync gap keeps its plain reading."""
    ev = Evidence()
    feed(ev, device_extra={"optimizer": 4.0}, host_extra={"sync": 3.0, "optimizer": 6.0})
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("optimizer +4.0 ms/step (host-bound"), d.text
    assert "the host now waits" not in d.text, d.text


def test_a_slower_data_loader_is_the_data_phase_with_its_wait():
    ev = Evidence()
    feed(ev, device_extra={"data": 6.0}, host_extra={"data": 6.0}, wait_extra_ms=6.0)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("data +6.0 ms/step (data-loader wait +6.0 ms, host-bound"), d.text


def test_waiting_for_the_other_ranks_is_the_sync_phase():
    ev = Evidence()
    feed(ev, device_extra={"sync": 7.0}, cpu_extra_ms=7.0)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("sync +7.0 ms/step (after backward, before the optimizer step: all-reduce"), d.text


def test_a_point_never_seen_joins_its_phase_to_the_next():
    """No DataLoader: the data phase's time is in forward, named for both."""
    ev = Evidence()
    feed(ev, device_extra={"forward": 5.0}, points=0b1110)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("data+forward +5.0 ms/step"), d.text


def test_sampled_steps_are_enough():
    ev = Evidence()
    feed(ev, device_extra={"optimizer": 3.0}, every=3)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("optimizer +3.0 ms/step"), d.text


def test_on_the_host_clock_host_cpu_stays_a_contributor():
    """A CPU-only job: its phases are host time, so a busy thread beside training (the process's
    CPU time +9 ms/step, every phase a little longer) is ranked as host CPU, not explained away."""
    ev = Evidence()
    extra = {"data": 0.5, "forward": 1.5, "backward": 2.0, "optimizer": 0.5}
    feed(ev, device_extra=extra, host_extra=extra, cpu_extra_ms=9.0, clock=agent_pb2.STEP_CLOCK_HOST)
    d = diagnose(ev.rank("j", 1), T0 + 500 * 0.04)
    assert d.text.startswith("host CPU +9.0 ms/step; backward +2.0 ms/step"), d.text
    assert "host-bound" not in d.text and "not a cause" not in d.text, d.text


def test_an_onset_dated_late_is_explained_against_the_settled_level_the_alert_compares_with():
    """The change at step 150 (6 s), the onset dated at step 560 (22.4 s): "before", ending a
    guard band ahead of the onset, is mostly after the change and finds nothing; given the times
    of the level the episode was raised against (steps 20-140), it names the phase."""
    ev = Evidence()
    feed(ev, device_extra={"backward": 5.0}, onset_step=150)
    late = T0 + 560 * 0.04
    assert not diagnose(ev.rank("j", 1), late).text.startswith("backward +5.0")
    d = diagnose(ev.rank("j", 1), late, (T0 + 20 * 0.04, T0 + 140 * 0.04))
    assert d.text.startswith("backward +5.0 ms/step"), d.text
    # a reference the rings no longer hold (or that ends after the guard band) is not used
    far = diagnose(ev.rank("j", 1), late, (T0 - 500.0, T0 - 400.0))
    assert far.text == diagnose(ev.rank("j", 1), late).text


def test_phases_that_began_after_the_settled_level_are_compared_over_what_came_before_the_onset():
    """The episode was raised against the settled level (steps 20-140) but the rank's first
    phase times came at step 200 (the sampler's budget accrues from attach): the phases are
    compared over what came before the onset's guard band, not left out."""
    ev = Evidence()
    feed(ev, device_extra={"optimizer": 4.0}, onset_step=450, phases_from=200)
    settled = (T0 + 20 * 0.04, T0 + 140 * 0.04)
    d = diagnose(ev.rank("j", 1), T0 + 450 * 0.04, settled)
    assert d.text.startswith("optimizer +4.0 ms/step"), d.text
    assert "no profiler window" not in d.text, d.text
    # with phase times in the settled span, that span is the one compared
    ev = Evidence()
    feed(ev, device_extra={"optimizer": 4.0}, onset_step=450, phases_from=0)
    assert diagnose(ev.rank("j", 1), T0 + 450 * 0.04, settled).text.startswith("optimizer +4.0 ms/step")


def test_an_onset_older_than_the_recent_blocks_still_has_a_before():
    """9,000 steps, the change at step 3,000, diagnosed at the end: the ring of recent step
    blocks holds the last 6,000 steps; older blocks are kept merged, so the step-time change and
    the phase that grew are still found (a real 12.5 ms H200 job: a warning raised 13,000 steps
    after its onset had no diagnosis at all)."""
    ev = Evidence()
    feed(ev, device_extra={"backward": 5.0}, onset_step=3000, steps=9000, every=4)
    r = ev.rank("j", 1)
    assert r.blocks[0][0] >= 3000 and len(r.old) > 0  # the blocks before the onset left the recent ring
    d = diagnose(r, T0 + 3000 * 0.04)
    assert d is not None and d.text.startswith("backward +5.0 ms/step"), d and d.text
    assert abs(d.step_delta_ms - 5.0) < 0.3, d.step_delta_ms
    # and against a settled level far back (steps 100-2,000), as a long-run slowdown compares
    d = diagnose(r, T0 + 8000 * 0.04, (T0 + 100 * 0.04, T0 + 2000 * 0.04))
    assert d is not None and abs(d.step_delta_ms - 5.0) < 0.3, d and d.text
