"""The evidence drift decides with (collector/detect/_evidence.py): which source holds a
step-time shift, and how the drift detector uses it. Synthetic series here are unit tests of
the rules; the real recordings are in tests/collector/detect/test_real_corpus.py."""

from __future__ import annotations

import random

from stepwatch.collector.detect import DriftConfig
from stepwatch.collector.detect._drift import DriftDetector
from stepwatch.collector.detect._evidence import RankEvidence

T0 = 1_800_000_000.0
PHASE_S = [0.004, 0.010, 0.020, 0.001, 0.005]  # data, forward, backward, sync, optimizer: 40 ms


def _feed(ev: RankEvidence, t0: float, t1: float, phases=PHASE_S, wait=0.0004, calls_per_s=0.0,
          calls0=0.0, step_s=0.040, host=0.3, hosts=None) -> float:
    """Steps of ``step_s`` from ``t0`` to ``t1``: every fourth one sampled with ``phases`` (their
    host times ``host`` x each, or ``hosts``), allocator samples each second; returns the
    cumulative allocator calls at the end."""
    t, i, calls, last_sample = t0, 0, calls0, t0
    rng = random.Random(int(t0))
    while t < t1:
        t += step_s
        i += 1
        ev.steps([t], [wait * (1 + 0.05 * rng.random())])
        if i % 4 == 0:
            values = [[p * (1 + 0.02 * rng.random())] for p in phases]
            ev.phase_samples([t], [0b1111], values, [[h] for h in hosts] if hosts else [[v[0] * host] for v in values])
        if t - last_sample >= 1.0:
            calls += calls_per_s * (t - last_sample)
            ev.allocator([t], [calls])
            last_sample = t
    return calls


def _grown(k: int, by: float) -> list:
    return [p + (by if j == k else 0.0) for j, p in enumerate(PHASE_S)]


def test_one_phase_that_grew_holds_the_shift():
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300)
    _feed(ev, T0 + 300, T0 + 360, phases=_grown(4, 0.004))  # the optimizer +4 ms of a 40 ms step
    b, unknown = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert unknown == () and b is not None
    assert (b.kind, b.name) == ("phase", "optimizer") and abs(b.after - b.before - 4.0) < 0.3, b
    assert "optimizer +4." in b.text()


def test_every_phase_grown_alike_by_a_slower_host_is_no_evidence():
    """A host that launches more slowly makes every phase longer by the same share, its host
    time with it (host-bound): not one phase's change, nor more work on the device."""
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300, host=0.95)
    _feed(ev, T0 + 300, T0 + 360, phases=[p * 1.10 for p in PHASE_S], host=0.95)
    b, unknown = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is None and unknown == ()


def test_a_longer_loader_wait_holds_the_shift():
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300)
    _feed(ev, T0 + 300, T0 + 360, wait=0.0044)
    b, _ = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is not None and b.kind == "loader" and abs(b.after - b.before - 4.0) < 0.3, b


def test_a_loader_wait_grown_many_times_holds_a_shift_it_is_a_third_of():
    """A wait for data leaves the device idle, and the phases after it then run at the host's
    pace: the step grows by more than the wait (a live H200 job: wait 0.2 -> 1.9 ms, step +4.1
    ms). A wait grown to many times its level holds the shift at a third of it; one that grew by
    a fraction of its level (a busy host's workers) needs half, as every other source."""
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300, wait=0.0002)
    _feed(ev, T0 + 300, T0 + 360, wait=0.0016)  # +1.4 ms of a +4 ms step: 8x its level
    b, _ = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is not None and b.kind == "loader" and 0.3 <= b.share < 0.5, b
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300, wait=0.0010)
    _feed(ev, T0 + 300, T0 + 360, wait=0.0024)  # +1.4 ms again, but 2.4x its level
    b, _ = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is None, b


def test_allocator_churn_holds_the_shift():
    ev = RankEvidence()
    calls = _feed(ev, T0, T0 + 300, calls_per_s=1.0)
    _feed(ev, T0 + 300, T0 + 360, calls_per_s=100.0, calls0=calls)  # 4 calls a 40 ms step
    b, _ = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is not None and b.kind == "allocator" and b.after > 3 * b.before, b


def test_too_few_blocks_say_what_could_not_be_compared():
    ev = RankEvidence()
    b, unknown = ev.backing(T0, T0 + 10, T0 + 20, T0 + 30, 0.040, 0.004)
    assert b is None and unknown == ("phase times", "loader wait", "allocator calls")


def test_grown_reads_the_same_source_now():
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300)
    _feed(ev, T0 + 300, T0 + 360, phases=_grown(2, 0.004))
    _feed(ev, T0 + 360, T0 + 480)  # back as it was
    b, _ = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is not None and b.name == "backward"
    assert ev.grown(b, T0 + 150, T0 + 290, T0 + 310, T0 + 360, 0.040) > 3.0
    assert abs(ev.grown(b, T0 + 150, T0 + 290, T0 + 420, T0 + 480, 0.040)) < 0.5


def _job(det: DriftDetector, ev: RankEvidence, t0: float, t1: float, ratio: float = 1.0, k=None,
         host: float = 1.0) -> list:
    """40 ms steps from ``t0`` to ``t1`` at ``ratio`` x the level, the time added in phase ``k``
    (None: in no phase: the host's own pace), and ``host - 1`` x the level more in no phase;
    returns (time, severity, condition) of each change of the detector's condition."""
    rng = random.Random(int(t0))
    out, t, step = [], t0, int((t0 - T0) / 0.04)
    phases = PHASE_S if k is None or ratio == 1.0 else _grown(k, 0.040 * (ratio - 1))
    while t < t1:
        d = 0.040 * (ratio + host - 1) * (1 + 0.01 * rng.gauss(0, 1))
        t += d
        step += 1
        ev.steps([t], [0.0004])
        if step % 4 == 0:
            ev.phase_samples([t], [0b1111], [[p] for p in phases], [[0.3 * p] for p in PHASE_S])
        if det.feed(step, t, d):
            out.append((t, det.condition.severity if det.condition else None, det.condition))
    return out


def test_a_change_with_evidence_that_comes_back_is_raised_each_time_but_a_wave_is_held_back():
    """+10% for 90 s, off 140 s, three times: with its time in one phase each is raised at the
    normal horizon in its own episode (decided "job"); with its time in no phase (the host's own
    pace) the first ends by itself within transient_s, and the next ones, no larger, must
    outlast it: the second is not raised within 60 s."""
    cfg = DriftConfig()
    for k, decided in ((2, "job"), (None, "steps")):
        ev = RankEvidence()
        det = DriftDetector(cfg, "j", 0, evidence=ev)
        _job(det, ev, T0, T0 + 300)
        assert det.armed
        raised = []
        t = T0 + 300
        for _ in range(3):
            changes = _job(det, ev, t, t + 90, 1.10, k)
            ups = [c for c in changes if c[1] is not None]
            raised.append(ups[0][0] - t if ups else None)
            if ups:
                assert ups[0][2].decided == decided, ups[0][2]
            changes = _job(det, ev, t + 90, t + 230)
            assert det.condition is None, (k, det.condition)  # it resolved while off
            t += 230
        if k is not None:
            assert all(r is not None and r <= 60 for r in raised), raised
        else:
            assert raised[0] is not None and raised[0] <= 60 and (raised[1] is None or raised[1] > 60), raised


def test_a_wave_still_holds_back_a_shift_no_larger_after_a_collector_restart():
    """The host's own +10% for 90 s ends by itself (a wave); the collector restarts 60 s later
    and takes up the saved state: the same +10% again, with no evidence, must still outlast the
    wave (not raised within 60 s), as without the restart; a saved state with damaged waves
    still reads (they are left out)."""
    cfg = DriftConfig()
    ev = RankEvidence()
    det = DriftDetector(cfg, "j", 0, evidence=ev)
    _job(det, ev, T0, T0 + 300)
    t = T0 + 300
    assert [c for c in _job(det, ev, t, t + 90, 1.10) if c[1] is not None]
    _job(det, ev, t + 90, t + 230)
    assert det.condition is None and det.armed
    state = det.state()
    assert state["waves"] and state["ended_at"] is not None, state
    again_ev = RankEvidence()
    again = DriftDetector(cfg, "j", 0, evidence=again_ev)
    again.restore(state)
    assert again.armed
    t += 230
    _job(again, again_ev, t, t + 60)  # (the restarted collector's buckets fill)
    ups = [c for c in _job(again, again_ev, t + 60, t + 150, 1.10) if c[1] is not None]
    assert not ups or ups[0][0] - (t + 60) > 60, ups[0][0] - (t + 60)
    damaged = dict(state, waves=[["x", 1, 2], [1.0, float("nan"), 3.0], "junk"], ended_at="soon")
    other = DriftDetector(cfg, "j", 0, evidence=RankEvidence())
    other.restore(damaged)
    assert other.armed


def test_device_work_grown_across_phases_holds_the_shift_unless_the_host_grew_with_it():
    """GEMMs whose device time shows in several phases (a real H200 job: backward +2.2,
    forward +1.0..2.2, optimizer +1.6 ms) are the device's work; the same growth with the
    phases' host time grown as much is a host that launches more slowly (launch-bound)."""
    grown = [p * 1.10 for p in PHASE_S]
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300)
    _feed(ev, T0 + 300, T0 + 360, phases=grown)
    b, _ = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is not None and b.kind == "device", b
    ev = RankEvidence()
    _feed(ev, T0, T0 + 300, host=0.95)
    _feed(ev, T0 + 300, T0 + 360, phases=grown, host=0.95)
    b, _ = ev.backing(T0 + 150, T0 + 290, T0 + 305, T0 + 360, 0.040, 0.004)
    assert b is None


def _wandering(det: DriftDetector, ev: RankEvidence, t0: float, t1: float, grown_s: float = 0.0) -> list:
    """A launch-bound job of 12 ms steps whose host wanders: every phase's time (device and
    host alike: the GPU waits on the launches) and so the step x (1 + 9% sin) over 150 s, with
    10% noise per step; from ``t0`` on the optimizer's device time holds ``grown_s`` more (the
    job's own change). Returns (time, condition) at each change of the condition."""
    import math
    rng = random.Random(int(t0))
    base = [0.0003, 0.0040, 0.0040, 0.0002, 0.0035]  # 12 ms of phases
    out, t, step = [], t0, int((t0 - T0) / 0.012)
    while t < t1:
        w = 1 + 0.09 * math.sin(2 * math.pi * (t - T0) / 150.0)
        phases = [p * w * (1 + 0.1 * rng.gauss(0, 1)) for p in base]
        phases[4] = base[4] * (1 + 0.01 * rng.gauss(0, 1)) + grown_s  # the optimizer's kernels: the device's pace
        d = 0.0002 + sum(phases)
        t += d
        step += 1
        ev.steps([t], [0.0001])
        if step % 30 == 0:
            ev.phase_samples([t], [0b1111], [[p] for p in phases], [[p * 0.9] for p in phases[:4]] + [[0.0012 * w]])
        if det.feed(step, t, d):
            out.append((t, det.condition))
    return out


def test_a_wandering_launch_bound_host_raises_nothing_but_a_phase_of_its_own_is_raised_at_once():
    """The step time of a launch-bound job wanders +-9% with its host (30 s medians spread ~5%:
    ``z`` spreads ask for +20% or more); the optimizer's device time, which the host does not
    bound, hardly moves. That phase grown by +10% of the step stands hundreds of its own spreads
    out: raised within 60 s as the job's change; the step times alone raise it late or never;
    the wandering alone raises nothing in 15 minutes."""
    cfg = DriftConfig()
    ev = RankEvidence()
    det = DriftDetector(cfg, "j", 0, evidence=ev)
    assert not [c for c in _wandering(det, ev, T0, T0 + 900) if c[1] is not None]
    for evidence in (True, False):
        ev = RankEvidence()
        det = DriftDetector(DriftConfig(evidence=evidence), "j", 0, evidence=ev)
        _wandering(det, ev, T0, T0 + 420)
        assert det.armed and det.condition is None
        ups = [c for c in _wandering(det, ev, T0 + 420, T0 + 540, grown_s=0.0012) if c[1] is not None]
        if evidence:
            assert ups and ups[0][0] - (T0 + 420) <= 60, ups
            c = ups[0][1]
            assert c.decided == "job" and c.evidence.name == "optimizer", c
            assert c.evidence.spreads >= cfg.evidence_z, c.evidence
        else:
            assert not ups or ups[0][0] - (T0 + 420) > 60, ups


def test_a_phase_that_wanders_by_itself_is_read_in_its_own_spreads():
    """The forward +4 ms of a 40 ms step: a still forward stands many of its own spreads out; a
    forward that wanders by as much by itself (runs of 60 s at +0 and +4 ms) stands few."""
    found = {}
    for wanders in (False, True):
        ev = RankEvidence()
        t = T0
        for i in range(1, 12000):
            t += 0.1
            ev.steps([t], [0.0004])
            more = 0.004 if wanders and (i // 600) % 2 else 0.0
            ev.phase_samples([t], [0b1111], [[p + (more if j == 1 else 0)] for j, p in enumerate(PHASE_S)],
                             [[0.3 * p] for p in PHASE_S])
        for i in range(600):
            t += 0.1
            ev.steps([t], [0.0004])
            ev.phase_samples([t], [0b1111], [[p + (0.006 if j == 1 else 0)] for j, p in enumerate(PHASE_S)],
                             [[0.3 * p] for p in PHASE_S])
        found[wanders], _ = ev.backing(t - 200, t - 70, t - 55, t, 0.040, 0.004)
    assert found[False] is not None and found[False].spreads >= 4 * DriftConfig().evidence_z, found
    assert found[True] is not None and found[True].spreads < DriftConfig().evidence_z, found


def test_a_change_after_the_host_wandered_up_is_dated_by_the_phase_that_holds_it():
    """The host's pace rises 5.5% at 300 s (no phase moves), then the job's forward grows by 4.5%
    of the step at 330 s: the step times alone date the raised shift (+10%) at the host's rise,
    more than half of it; the forward's own blocks date it at 330 s, and the evidence read from
    there is forward's whole growth (+1.8 ms), not a share diluted by the 30 s before it."""
    cfg = DriftConfig()
    ev = RankEvidence()
    det = DriftDetector(cfg, "j", 0, evidence=ev)
    _job(det, ev, T0, T0 + 300)
    assert det.armed
    rng = random.Random(7)
    t, step, raised = T0 + 300, int(300 / 0.04), None
    while t < T0 + 480 and raised is None:
        job = 0.045 if t >= T0 + 330 else 0.0
        d = 0.040 * (1.055 + job) * (1 + 0.01 * rng.gauss(0, 1))
        t += d
        step += 1
        ev.steps([t], [0.0004])
        if step % 4 == 0:
            phases = _grown(1, 0.040 * job)
            ev.phase_samples([t], [0b1111], [[p] for p in phases], [[0.3 * p] for p in PHASE_S])
        if det.feed(step, t, d) and det.condition is not None:
            raised = det.condition
    assert raised is not None and raised.decided == "job", raised
    assert T0 + 325 <= raised.since <= T0 + 340, raised.since - T0
    assert raised.evidence.name == "forward" and raised.evidence.after - raised.evidence.before > 1.6, raised.evidence


def test_a_change_with_new_evidence_inside_an_episode_raised_higher_is_a_further_change():
    """The host's own +12% for 60 s opens an episode with no evidence; the host comes back to
    +5% and stays there; then the optimizer takes +10% of the step more: +3% over the level
    the episode was raised on, +10% over its level just before, held by the optimizer's device
    time. It is a further change of the episode within 60 s, decided by the optimizer, against
    the level before it. The same +10% with no phase moving (the host again) is no further
    change: only evidence lets a change under the level raised show (a live H200 job's slower
    loader after its host's own +12%, tests/data/real/diag/h200zr)."""
    cfg = DriftConfig()
    for k in (4, None):
        ev = RankEvidence()
        det = DriftDetector(cfg, "j", 0, evidence=ev)
        _job(det, ev, T0, T0 + 300)
        assert det.armed and det.condition is None
        ups = [c for c in _job(det, ev, T0 + 300, T0 + 360, host=1.12) if c[1] is not None]
        assert ups and ups[0][2].decided == "steps", ups
        _job(det, ev, T0 + 360, T0 + 480, host=1.05)
        assert det.condition is not None and det.condition.change == 0, det.condition
        start = T0 + 480
        changes = _job(det, ev, start, start + 90, 1.10, k, host=1.05)
        further = [(t, c) for t, _, c in changes if c is not None and c.change > 0]
        if k is None:
            assert not further, further
            continue
        assert further and further[0][0] - start <= 60, [(t - start, c) for t, c in changes]
        c = further[0][1]
        assert c.decided == "job" and c.evidence.name == "optimizer", c
        assert start - 10 <= c.since <= start + 15, c.since - start
        assert det.reference_span()[1] > T0 + 360, det.reference_span()  # (read against the level before)


def test_an_episode_decided_by_its_evidence_keeps_it_across_a_collector_restart():
    """A +10% change in one phase is raised "job" with that phase as its evidence; the collector
    restarts while it lasts and takes up the saved state: the episode goes on with the same
    evidence, decision, summary and diagnosis span (not "no one thing the agent measures ... holds it"),
    and still ends once the phase's time is back. A saved evidence that does not read leaves the
    episode open with its evidence unknown ("", not "steps")."""
    cfg = DriftConfig()
    ev = RankEvidence()
    det = DriftDetector(cfg, "j", 0, evidence=ev)
    _job(det, ev, T0, T0 + 300)
    t = T0 + 300
    assert [c for c in _job(det, ev, t, t + 60, 1.10, 2) if c[1] is not None]
    before = det.condition
    assert before.decided == "job" and before.evidence is not None, before
    state = det.state()
    again_ev = RankEvidence()
    again = DriftDetector(cfg, "j", 0, evidence=again_ev)
    again.restore(state)
    c = again.condition
    assert (c.decided, c.evidence, c.summary) == (before.decided, before.evidence, before.summary), c
    assert again.reference_span() == det.reference_span() is not None
    _job(again, again_ev, t + 60, t + 120, 1.10, 2)
    assert again.condition is not None and again.condition.decided == "job", again.condition
    _job(again, again_ev, t + 120, t + 260)
    assert again.condition is None  # it resolved once the phase came back
    damaged = dict(state, episode=dict(state["episode"], evidence={"kind": "phase"}, span="x"))
    other = DriftDetector(cfg, "j", 0, evidence=RankEvidence())
    other.restore(damaged)
    assert other.condition is not None and other.condition.decided == "" and other.condition.evidence is None


def test_the_wait_against_its_settled_level_holds_a_slow_change_and_a_still_wait_holds_nothing():
    """``wait_level`` reads the wait over a span; ``wait_since`` holds a shift against that level
    read before, after the span's blocks are gone: 0.4 ms a step while settling, 8.4 ms 40
    minutes later holds +8 ms a step, in its own spreads; the same wait unchanged holds nothing,
    nor does a wait that grew too little for the shift."""
    ev = RankEvidence()
    _feed(ev, T0, T0 + 180)
    level = ev.wait_level(T0 + 60, T0 + 180)
    assert level is not None and abs(level - 0.0004) < 0.00005, level
    _feed(ev, T0 + 180, T0 + 2400, wait=0.0004)
    _feed(ev, T0 + 2400, T0 + 2500, wait=0.0084)
    assert ev.wait_level(T0 + 60, T0 + 180) is None  # (30 minutes of blocks kept: the span is gone)
    b = ev.wait_since(level, T0 + 2410, T0 + 2500, 0.040, 0.008)
    assert b is not None and b.name == "data-loader wait" and 7.9 < b.after - b.before < 8.5, b
    assert b.spreads is not None and b.spreads > 4, b
    assert ev.wait_since(level, T0 + 2410, T0 + 2500, 0.040, 0.030) is None  # (+8 of +30 ms)
    still = RankEvidence()
    _feed(still, T0, T0 + 2500)
    assert still.wait_since(level, T0 + 2410, T0 + 2500, 0.040, 0.008) is None


def _launch_bound(until: float, seed: int, k: int, added, shape: str) -> RankEvidence:
    """The evidence of a launch-bound job from T0 to ``until``: 11.5 ms steps, every fourth one's
    phases sampled, each phase's device time its host time, both wandering +-12% with the host's
    pace in 60-s runs; ``added(t)`` (s) more a step from data time ``t`` on, all of it on phase
    column ``k``'s device time. ``shape``: "device" (its host time as before), "paced" (its host
    time grown as much: the host's pace) or "gpu-bound" (the host launches in 0.3 of the device's
    time)."""
    lb = [0.0005, 0.0045, 0.0055, 0.0003, 0.0012]  # data, forward, backward, sync, optimizer: 11.5 ms
    ev = RankEvidence()
    rng = random.Random(seed)
    t, i = T0, 0
    while t < until:
        more = added(t)
        t += 0.0115 + more
        i += 1
        ev.steps([t], [0.0001])
        if i % 4:
            continue
        pace = 1.0 + 0.12 * ((int((t - T0) // 60) * 7) % 3 - 1) + 0.02 * rng.random()
        host = [p * pace for p in lb]
        dev = [h + (more if j == k else 0.0) for j, h in enumerate(host)]
        if shape == "paced":
            host = dev
        elif shape == "gpu-bound":
            host = [0.3 * h for h in host]
        ev.phase_samples([t], [0b1111], [[v] for v in dev], [[v] for v in host])
    return ev


def test_work_added_on_the_device_of_a_launch_bound_job_stands_out_of_its_device_time_beyond_the_host():
    """A launch-bound job: each phase's device time is its host time (the GPU keeps pace with the
    launches), and both wander together with the host's pace, +-12% in 60-s runs. Forward then
    takes +1.1 ms more on the device (of an 11.5 ms step; its host time as before): within
    forward's own wander of device time, far out of its device time beyond the host's, which
    stood at nothing. The same growth with its host time grown as much (the host's pace) is no
    such reading."""
    edge = T0 + 600
    found = {}
    for paced in (False, True):
        ev = _launch_bound(edge + 50, 3, 1, lambda t: 0.0011 if t >= edge else 0.0, "paced" if paced else "device")
        b, _ = ev.backing(edge - 60, edge - 10, edge + 5, edge + 50, 0.0115, 0.0011)
        found[paced] = (b, None if b is None else ev.spreads(b, edge - 10, edge + 5, edge + 50, 0.0115))
    (b, device_only), (paced_b, _) = found[False], found[True]
    z = DriftConfig().evidence_z
    assert b is not None and (b.kind, b.name, b.host_paced) == ("phase", "forward", False), b
    assert b.spreads >= 2 * z and (device_only is None or device_only < z), (b.spreads, device_only)
    assert paced_b is None or paced_b.host_paced, paced_b


def test_a_slow_ramp_of_work_on_the_device_of_a_launch_bound_job_holds_its_device_time_beyond_the_host():
    """A launch-bound job (each phase's device time is its host time, both wandering +-12% with
    the host in 60-s runs) settles over its first 10 minutes; then backward takes more time on
    the device by degrees, +1.1 ms of an 11.5 ms step over 20 minutes (its host time as
    before). Read against the levels while it settled, backward's device time beyond its host
    time holds the step's growth and stands far out of that difference's own spreads. The same
    ramp with the host time grown as much (the host's pace) holds nothing; a GPU-bound job (the
    device runs ahead of the launches) has no such level to read against."""
    settled, end = T0 + 600, T0 + 600 + 1200
    found = {}
    for case in ("device", "paced", "gpu-bound"):
        ev = _launch_bound(end, 5, 2, lambda t: 0.0011 * min(1.0, max(0.0, t - settled) / 1200), case)
        levels = ev.beyond_levels(settled - 120, settled)
        found[case] = (levels, None if levels is None else
                       ev.beyond_since(levels, end - 60, end, 0.0115, 0.0011))
    levels, b = found["device"]
    assert levels is not None and 2 in levels[1] and abs(levels[1][2]) < 1e-4, levels
    assert b is not None and (b.kind, b.name) == ("beyond host", "backward") and b.share >= 0.5, b
    assert b.spreads is not None and b.spreads >= 2 * DriftConfig().evidence_z, b
    assert "backward's device time beyond its host time +1.1 ms/step" in b.text(), b.text()
    paced_levels, paced_b = found["paced"]
    assert paced_levels is not None and paced_b is None, paced_b
    assert found["gpu-bound"] == (None, None), found["gpu-bound"]
