"""Drift state survives a collector restart (collector/detect/_persist.py): the settled level,
the noise spreads and an open episode, in SQLite under ``state_dir``."""

from __future__ import annotations

import math
import pathlib
import random
import sqlite3
import time

from stepwatch.collector.detect import DetectionEngine, Steps, parse_detection
from stepwatch.collector.detect import _drift_rule
from stepwatch.collector.detect._persist import DriftStore

CFG = parse_detection({"warmup_steps": 10})
T0 = 1.7e9


def _feed(engine, rng, start_step, start_time, seconds, level):
    """40 ms steps from ``start_time`` for ``seconds`` at ``level(t)``; saves once a minute as
    the collector's housekeeping does. Returns (next step, time, conditions seen)."""
    s, now, seen = start_step, start_time, []
    while now - start_time < seconds:
        steps, times, durs = [], [], []
        for _ in range(25):
            s += 1
            dt = 0.04 * level(now - T0) * math.exp(rng.gauss(0, 0.01))
            now += dt
            steps.append(s), times.append(now), durs.append(dt)
        engine.feed("j", 0, Steps(steps, times, durs, [0.0] * 25))
        engine.tick(now)
        engine.save(now)
        seen += [c for c in engine.conditions() if c.alertname == "StepwatchThroughputDrift"]
    return s, now, seen


def test_a_restart_keeps_the_settled_level_so_a_ramp_is_still_measured_from_it(tmp_path):
    """Six settled minutes, then a ramp starts; the collector restarts (a new engine on the same
    directory) two minutes into it. The new engine is armed at once and raises the ramp against
    the level the job settled at before the restart, not the level it had reached by then."""
    rng, store = random.Random(4), DriftStore(str(tmp_path))
    ramp = lambda t: 1.0 + 0.06 * min(1.0, max(0.0, t - 360) / 600)  # noqa: E731
    first = DetectionEngine(CFG, store)
    s, now, seen = _feed(first, rng, 0, T0, 480, ramp)
    assert seen == [] and first.armed()[("j", 0)]
    store.close()  # the collector stops here (its pending saves written; a kill loses the last flush_s)
    again = DetectionEngine(CFG, DriftStore(str(tmp_path)))
    s, now, seen = _feed(again, rng, s, now, 900, ramp)
    assert seen, "the ramp was not raised after the restart"
    assert "vs this job's level settled at" in seen[0].summary and "(40.0 ms" in seen[0].summary, seen[0].summary


def test_an_open_episode_goes_on_after_a_restart(tmp_path):
    rng, store = random.Random(5), DriftStore(str(tmp_path))
    shift = lambda t: 1.12 if t >= 300 else 1.0  # noqa: E731
    first = DetectionEngine(CFG, store)
    s, now, seen = _feed(first, rng, 0, T0, 480, shift)
    assert seen and seen[-1].severity == "critical"
    since = seen[-1].since
    store.flush()  # (the writer thread's flush, done here: a kill loses at most the last flush_s of saves)
    again = DetectionEngine(CFG, DriftStore(str(tmp_path)))
    _, _, seen = _feed(again, rng, s, now, 2, shift)
    assert seen and seen[0].severity == "critical" and seen[0].since == since, seen


def test_a_damaged_state_file_is_logged_and_detection_goes_on(tmp_path, caplog):
    (tmp_path / "detection.sqlite").write_bytes(b"not a database" * 100)
    store = DriftStore(str(tmp_path))
    engine = DetectionEngine(CFG, store)
    _, _, seen = _feed(engine, random.Random(1), 0, T0, 300, lambda t: 1.0)
    assert seen == [] and engine.armed()[("j", 0)]
    assert "detection state" in caplog.text and "detection goes on without it" in caplog.text
    try:
        sqlite3.connect(str(tmp_path / "detection.sqlite")).execute("SELECT 1 FROM drift").fetchall()
        damaged = False
    except sqlite3.DatabaseError:
        damaged = True
    assert damaged  # left as it was for a person to look at; never raised into detection


def test_a_lock_held_by_another_process_never_stalls_the_caller_and_saving_resumes(tmp_path):
    """Another connection (as another process would) holds the state file's write lock: saves
    return at once (no I/O on the caller's thread), the writer's flushes fail and are counted,
    the rows stay pending; once the lock goes, the next flush writes them."""
    store = DriftStore(str(tmp_path), thread=False, lock_wait_s=0.05)
    other = sqlite3.connect(str(tmp_path / "detection.sqlite"), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    for rank in range(200):
        store.save("j", rank, {"settled": 0.04, "rank": rank})
    assert store.load("j", 7) == {"settled": 0.04, "rank": 7}  # (what is pending is read back)
    assert store.flush() is False and store.failures == 1
    assert store.flush() is False and store.failures == 2  # counted each time, logged once
    other.execute("ROLLBACK")
    assert store.flush() is True
    rows = other.execute("SELECT COUNT(*) FROM drift").fetchone()[0]
    assert rows == 200
    other.close()
    store.close()


def test_a_load_under_another_process_lock_waits_only_read_wait_s(tmp_path):
    store = DriftStore(str(tmp_path), thread=False, read_wait_s=0.02)
    store.save("j", 0, {"settled": 0.04})
    store.flush()
    fresh = DriftStore(str(tmp_path), thread=False, read_wait_s=0.02)
    fresh.file.read_backoff_s = 0.0
    other = sqlite3.connect(str(tmp_path / "detection.sqlite"), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    assert fresh.load("j", 0) is None and fresh.failures == 1  # the rank learns afresh; counted
    other.execute("ROLLBACK")
    assert fresh.load("j", 0) == {"settled": 0.04}
    for s in (store, fresh):
        s.close()
    other.close()


def test_ranks_first_seen_under_another_process_lock_wait_once_not_each(tmp_path, monkeypatch):
    """A fleet connecting while another process holds the state file's lock: the first rank's
    load waits ``read_wait_s`` and fails; the loads after it within ``read_backoff_s`` are not
    tried (each would have waited as long on the event loop); once the backoff has passed and
    the lock is gone, loads read the saved states again. (The store's monotonic clock is held
    still, so the machine's speed decides nothing.)"""
    import types

    from stepwatch.collector.detect import _persist

    clock = [1000.0]
    monkeypatch.setattr(_persist, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    store = DriftStore(str(tmp_path), thread=False)
    for rank in range(40):
        store.save("j", rank, {"settled": 0.04, "rank": rank})
    store.flush()
    fresh = DriftStore(str(tmp_path), thread=False, read_wait_s=0.02)
    other = sqlite3.connect(str(tmp_path / "detection.sqlite"), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    assert [fresh.load("j", rank) for rank in range(40)] == [None] * 40
    assert fresh.failures == 1 and fresh.file.skipped == 39
    other.execute("ROLLBACK")
    clock[0] += fresh.file.read_backoff_s - 0.1
    assert fresh.load("j", 39) is None and fresh.file.skipped == 40  # (still within the backoff)
    clock[0] += 0.2
    assert fresh.load("j", 39) == {"settled": 0.04, "rank": 39} and fresh.failures == 1
    for s in (store, fresh):
        s.close()
    other.close()


def test_a_store_that_could_not_open_opens_later_and_writes_what_waited(tmp_path, monkeypatch):
    from stepwatch.collector.detect import _persist

    where = tmp_path / "state"
    where.write_text("a file where the directory should be")  # (as a full or missing disk would)
    store = DriftStore(str(where), thread=False)
    assert store.failures == 1
    store.save("j", 0, {"settled": 0.04})
    monkeypatch.setattr(_persist, "_REOPEN_S", 0.0)
    assert store.flush() is False  # still cannot open
    where.unlink()
    where.mkdir()
    assert store.flush() is True
    assert DriftStore(str(where), thread=False).load("j", 0) == {"settled": 0.04}
    store.close()


def test_the_writer_thread_flushes_on_its_own(tmp_path):
    store = DriftStore(str(tmp_path), flush_s=0.05)
    store.save("j", 3, {"settled": 0.05})
    reader = sqlite3.connect(str(tmp_path / "detection.sqlite"))
    for _ in range(200):  # (bounded: 10 s at most)
        if reader.execute("SELECT COUNT(*) FROM drift").fetchone()[0] == 1:
            break
        time.sleep(0.05)
    assert reader.execute("SELECT state FROM drift WHERE job = 'j' AND rank = 3").fetchone()[0] == '{"settled": 0.05}'
    reader.close()
    store.close()


def test_the_collector_exports_the_store_failures(start_collector, tmp_path):
    col = start_collector(state_dir=str(tmp_path / "state"))
    status, _, body = col.get("/metrics")
    assert status == 200
    line = [x for x in body.decode().splitlines() if x.startswith("stepwatch_collector_state_store_failures_total")]
    assert line == ["stepwatch_collector_state_store_failures_total 0.0"], line
    col.collector._store.file.failures += 2  # (as two failed flushes would leave it)
    _, _, body = col.get("/metrics")
    assert "stepwatch_collector_state_store_failures_total 2.0" in body.decode()


def _replayed_with_a_restart(evs: list, cfg, cut: float, where) -> tuple[list, list]:
    """``evs`` replayed into a collector's Detection that saves to a DriftStore in ``where`` until
    data time ``cut``, stopped there (its pending saves written), and a new one on the same store
    replayed the agents' connects and everything from ``cut`` on: the alerts before and after."""
    from stepwatch.collector._replay import replay
    from stepwatch.collector.alerting import Detection

    store = DriftStore(str(where))
    before = replay([e for e in evs if e.time < cut], cfg, detection=Detection(cfg, log_changes=False, store=store))
    store.close()
    after = replay([e for e in evs if e.kind == "connect"] + [e for e in evs if e.time >= cut and e.kind != "connect"],
                   cfg, detection=Detection(cfg, log_changes=False, store=DriftStore(str(where))))
    return before, after


def test_a_real_change_of_the_job_keeps_its_evidence_across_a_restart(tmp_path):
    """The held-out live recording h200zs (tests/data/real/diag) replayed with a collector
    restart 45 s into its GEMMs in backward (raised at 30 s): the restarted collector's episode
    goes on decided by the backward's time, as without the restart (without the saved evidence it
    read "no one thing the agent measures beside the step time holds it"), and resolves within 2
    minutes of the GEMMs' end; the loader and ``empty_cache()`` after it are raised as before."""
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, load

    start, end = 1796360717.63, 1796360807.63  # the GEMMs (diag README)
    evs = list(events(load(str(pathlib.Path(__file__).parents[2] / "data" / "real" / "diag"
                                / "h200zs_1gpu_m_pulses.jsonl.gz"))))
    before, after = _replayed_with_a_restart(evs, DetectionConfig(), start + 45, tmp_path)
    assert [a.decided for a in before if a.state == "firing"] == ["job"], [a.summary for a in before]
    gemms = [a for a in after if abs(a.onset - start) <= 15]
    assert len(gemms) == 1, [(a.onset - start, a.summary) for a in after]
    g = gemms[0]
    assert g.decided == "job" and g.evidence["name"] == "backward" and "a change of the job" in g.summary, g.summary
    assert g.ends_at is not None and g.ends_at - end <= 120, g.ends_at - end
    assert [a.decided for a in after if a.onset > end] == ["job", "job"], [a.summary for a in after]


def _slow_loader_ramp(tmp_path) -> tuple:
    """The held-out launch-bound h200zw played six times, its loader's wait ramped to +5% of the
    step over 15 minutes from 270 s (test_real_corpus's slow loader ramp): its events, the
    ramp's start, and the drift alerts raised on the wait after it, replayed with no restart."""
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, first_step_time, inject, load, repeat

    series = repeat(load(str(pathlib.Path(__file__).parents[2] / "data" / "real" / "h200zw_1gpu_s.jsonl.gz")), 6,
                    match=True)
    at = first_step_time(series) + 270
    evs = list(events(inject(series, "ramp", 0.05, at, 900, "loader")))
    slow = [a for a in _replayed_with_a_restart(evs, DetectionConfig(), math.inf, tmp_path)[0]
            if a.fired_at and a.fired_at >= at and "data-loader wait" in a.fired_summary]
    return evs, at, slow


def test_a_slow_loader_ramp_that_goes_on_across_a_restart_is_raised_after_it(tmp_path):
    """The held-out launch-bound h200zw played six times, its loader's wait ramped to +5% of the
    step over 15 minutes from 270 s, the collector restarted 2 minutes into the ramp (before it
    is raised): the restarted rank raises it, decided by the wait against its level while the
    rank settled, which is saved with the drift state (the restarted blocks hold no settling
    span: without it the restarted rank raised no slow change at all). (A host wave raised 38 s
    into the ramp, decided by the steps alone, is open at the restart and resolves after it.)"""
    from stepwatch.collector.detect import DetectionConfig

    evs, at, whole = _slow_loader_ramp(tmp_path)
    assert len(whole) == 1 and whole[0].fired_at > at + 120, [(a.fired_at - at, a.fired_summary) for a in whole]
    before, after = _replayed_with_a_restart(evs, DetectionConfig(), at + 120, tmp_path / "r")
    assert [a for a in before if "data-loader wait" in (a.fired_summary or "")] == []
    slow = [a for a in after if a.fired_at and a.fired_at >= at + 120 and "data-loader wait" in a.fired_summary]
    assert len(slow) == 1 and slow[0].decided == "job" and "data-loader wait" in slow[0].fired_summary, [
        (a.fired_at - at, a.fired_summary) for a in slow]
    assert slow[0].fired_at - whole[0].fired_at < 120, slow[0].fired_at - whole[0].fired_at


def test_a_slow_backward_ramp_that_goes_on_across_restarts_is_raised_after_them_and_stays_open(tmp_path):
    """The held-out launch-bound h200zw played six times, backward's device time ramped to +5% of
    the step over 30 minutes from 240 s (test_real_corpus's slow backward ramp), the collector
    restarted 10 minutes into the ramp (before it is raised): the restarted rank raises it (no
    later than 2 minutes after the replay without a restart does; its spreads measured afresh),
    decided by backward's device time beyond its host time against its level while the rank
    settled, which is saved with the drift state. Restarted again 3 minutes after that raise, the
    episode goes on with its onset and stays open to the end (its evidence's level before stands
    in for the settling span)."""
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, first_step_time, inject, load, repeat

    series = repeat(load(str(pathlib.Path(__file__).parents[2] / "data" / "real" / "h200zw_1gpu_s.jsonl.gz")), 6,
                    match=True)
    at = first_step_time(series) + 240
    evs = list(events(inject(series, "ramp", 0.05, at, 1800, "backward")))
    whole = [a for a in _replayed_with_a_restart(evs, DetectionConfig(), math.inf, tmp_path)[0]
             if a.fired_at and "backward's device time beyond" in a.fired_summary]
    assert len(whole) == 1 and whole[0].fired_at > at + 720, [(a.fired_at - at, a.fired_summary) for a in whole]
    before, after = _replayed_with_a_restart(evs, DetectionConfig(), at + 600, tmp_path / "r")
    assert [a for a in before if "backward's device time beyond" in (a.fired_summary or "")] == []
    slow = [a for a in after if a.fired_at and "backward's device time beyond" in a.fired_summary]
    assert len(slow) == 1 and slow[0].decided == "job", [(a.fired_at - at, a.fired_summary) for a in after]
    assert at + 600 < slow[0].fired_at < whole[0].fired_at + 120, (slow[0].fired_at - at, whole[0].fired_at - at)
    _, after = _replayed_with_a_restart(evs, DetectionConfig(), whole[0].fired_at + 180, tmp_path / "r2")
    going = [a for a in after if a.alertname == "StepwatchThroughputDrift" and abs(a.onset - whole[0].onset) < 1]
    assert len(going) == 1 and going[0].ends_at is None and going[0].decided == "job", [
        (a.onset - whole[0].onset, a.ends_at, a.summary) for a in after]


def _pulses_restarted(name: str, where_each: tuple, k: int, into_s: float, tmp_path) -> tuple:
    """The real recording ``name`` played three times, +10% pulses of ``where_each`` from 240 s
    (90 s on, 140 s off), replayed with the collector restarted ``into_s`` after the start of
    pulse ``k``: each pulse's (start, end), the drift alerts after the restart."""
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, first_step_time, load, pulses, repeat

    series = repeat(load(str(pathlib.Path(__file__).parents[2] / "data" / "real" / name)), 3, match=True)
    series, spans = pulses(series, where_each, first_step_time(series) + 240.0)
    _, after = _replayed_with_a_restart(list(events(series)), DetectionConfig(), spans[k][0] + into_s, tmp_path)
    return spans, [a for a in after if a.alertname == "StepwatchThroughputDrift"]


def _h200zb_pulses_restarted(where_each: tuple, k: int, into_s: float, tmp_path) -> tuple:
    """:func:`_pulses_restarted` on the held-out h200zb (2 x H200, its host wanders)."""
    return _pulses_restarted("h200zb_2gpu_m.jsonl.gz", where_each, k, into_s, tmp_path)


def test_an_episode_whose_evidence_went_away_ends_after_a_restart_though_the_host_stays_up(tmp_path):
    """The held-out 2 x H200 job h200zb (its host wanders by a few percent) with four +10% pulses
    (backward, the loader's wait, forward, optimizer; 90 s on, 140 s off), the collector
    restarted 45 s into the loader's. The restarted rank holds no block of the span its episode's
    evidence was read against, so the evidence's own saved level before stands in: the loader's
    episodes end within 2 minutes of its end, as without the restart (68 s), and the forward
    pulse after it is raised in an episode of its own on both ranks. Without that level the step
    alone had to clear, which the host held up: 118 and 308 s after the end, the forward pulse
    folded into rank 1's loader episode."""
    spans, drift = _h200zb_pulses_restarted(("backward", "loader", "forward", "optimizer"), 1, 45, tmp_path)
    (start, end), (f_start, _) = spans[1], spans[2]
    loader = [a for a in drift if start - 30 <= a.onset < f_start - 30]
    assert sorted(a.rank for a in loader) == [0, 1], [(a.rank, a.onset - start, a.summary) for a in drift]
    assert all(a.decided == "job" and a.evidence["name"] == "data-loader wait" for a in loader), \
        [(a.rank, a.decided, a.evidence) for a in loader]
    assert all(a.ends_at is not None and a.ends_at - end <= 120 for a in loader), \
        [(a.rank, a.ends_at and a.ends_at - end) for a in loader]
    forward = [a for a in drift if f_start - 30 <= a.starts_at < spans[3][0] - 30]
    assert sorted(a.rank for a in forward) == [0, 1], [(a.rank, a.starts_at - f_start, a.summary) for a in drift]
    assert all(a.fired_at - f_start <= 60 and a.decided == "job" for a in forward), \
        [(a.rank, a.fired_at - f_start, a.decided) for a in forward]


def _third_pulse_restarted_before_it(where_each: tuple, tmp_path) -> tuple:
    """:func:`_h200zb_pulses_restarted` 60 s before the third pulse: the drift alerts after the
    restart, those whose episode began with the third pulse, its start."""
    spans, drift = _h200zb_pulses_restarted(where_each, 2, -60, tmp_path)
    (start, _), (next_start, _) = spans[2], spans[3]
    return drift, [a for a in drift if start - 30 <= a.starts_at < next_start - 30], start


def test_a_source_measured_before_a_restart_decides_its_change_again_soon_after_it(tmp_path):
    """The held-out 2 x H200 job h200zb with +10% pulses in backward, the loader's wait, backward
    again and the optimizer, the collector restarted 60 s before the second backward pulse: the
    restarted ranks hold 12 blocks, too few to measure backward's own spread (18), so the spread
    measured before the restart, carried in the drift state, stands in. Both ranks raise it within
    45 s, decided by backward (34 s without the restart); without the carried spread rank 0 waited
    for the step time's spreads alone: 62 s."""
    drift, again, start = _third_pulse_restarted_before_it(("backward", "loader", "backward", "optimizer"), tmp_path)
    assert sorted(a.rank for a in again) == [0, 1], [(a.rank, a.starts_at - start, a.summary) for a in drift]
    assert all(a.fired_at - start <= 45 and a.decided == "job" and a.evidence["name"] == "backward" for a in again), \
        [(a.rank, a.fired_at - start, a.decided, a.evidence) for a in again]


def test_a_source_first_read_after_a_restart_is_decided_by_its_evidence_too(tmp_path):
    """h200zb with the four pulses (backward, loader, forward, optimizer), the collector restarted
    60 s before the forward pulse, the first change in forward: no shift was read against forward
    before the restart, so its spread was measured at a save (``measure_unread``) and carried.
    Both ranks raise it within 45 s, decided by forward (34 s without the restart); without that
    measurement rank 0 waited for the step time's spreads: 62 s."""
    drift, forward, start = _third_pulse_restarted_before_it(("backward", "loader", "forward", "optimizer"), tmp_path)
    assert sorted(a.rank for a in forward) == [0, 1], [(a.rank, a.starts_at - start, a.summary) for a in drift]
    assert all(a.fired_at - start <= 45 and a.decided == "job" and a.evidence["name"] == "forward" for a in forward), \
        [(a.rank, a.fired_at - start, a.decided, a.evidence) for a in forward]


def test_spreads_carried_over_a_restart_are_measured_over_the_runs_a_change_is_read_in(tmp_path):
    """The held-out 2 x H200 job h200x_2gpu_m with four +10% pulses (backward, the loader's wait,
    forward, the optimizer), the collector restarted 60 s before the forward pulse. The restarted
    rank reads forward's growth over 7-12 blocks; a spread measured at the saves over 6-block
    runs alone stood in for all of them (a 6-block run's medians spread more), so rank 1 read it
    3.2-3.8 spreads out, under ``evidence_z``, and raised it 127 s after it began. Measured over
    runs of 6, 8, 10 and 12 blocks, the longest run no longer than the span read stands in: both
    ranks raise it within 60 s, decided by forward."""
    spans, drift = _pulses_restarted("h200x_2gpu_m.jsonl.gz", ("backward", "loader", "forward", "optimizer"),
                                     2, -60, tmp_path)
    (start, _), (next_start, _) = spans[2], spans[3]
    forward = [a for a in drift if start - 30 <= a.starts_at < next_start - 30]
    assert sorted(a.rank for a in forward) == [0, 1], [(a.rank, a.starts_at - start, a.summary) for a in drift]
    assert all(a.fired_at - start <= 60 and a.decided == "job" and a.evidence["name"] == "forward" for a in forward), \
        [(a.rank, a.fired_at - start, a.decided, a.evidence) for a in forward]

def test_a_restart_inside_a_change_never_takes_its_end_for_the_level_before(tmp_path):
    """The held-out launch-bound 1 x H200 job h200v (~13 ms steps) with +10% pulses in backward,
    the loader's wait, forward and the optimizer, the collector restarted 10 s before the loader's
    pulse ends. The restarted rank's history then holds only the pulse's last seconds and the dip
    its end leaves (the loader catching up), while the restored episode still stands: none of
    that is the job's level before a later window. Nothing is raised between the pulses, and
    forward is raised within 60 s in an episode of its own, decided by its evidence. Read against
    that dip, the step raised "+4.7% vs the level before ... no one thing the agent measures
    beside the step time holds it" 63 s after the loader's end, and forward folded into it as a
    further change raised 64 s after it began."""
    spans, drift = _pulses_restarted("h200v_1gpu_xs.jsonl.gz", ("backward", "loader", "forward", "optimizer"),
                                     1, 80, tmp_path)
    assert [a.decided for a in drift] == ["job", "job", "job"], \
        [(a.starts_at - spans[1][0], a.decided, a.summary) for a in drift]
    f_start = spans[2][0]
    forward = [a for a in drift if f_start - 30 <= a.starts_at < spans[3][0] - 30]
    assert len(forward) == 1 and forward[0].fired_at - f_start <= 60, [(a.starts_at - f_start, a.summary) for a in drift]
    assert forward[0].evidence["name"] == "forward", forward[0].evidence


def test_a_change_that_began_just_before_a_restart_is_read_against_the_blocks_before_it(tmp_path):
    """The held-out 2 x H200 job h200zb (its host wanders) with +10% pulses in backward, the
    loader's wait, forward and the optimizer, the collector restarted 10 s into the loader's: the
    restarted ranks take up the evidence blocks of the 150 s before the last save, so the loader's
    change is read against the wait before its onset. Both ranks raise it within 60 s, decided by
    the loader's wait (34-39 s with no restart). Without those blocks neither rank could compare
    its evidence, and the step time alone never raised it on that host."""
    spans, drift = _h200zb_pulses_restarted(("backward", "loader", "forward", "optimizer"), 1, 10, tmp_path)
    (start, _), (next_start, _) = spans[1], spans[2]
    loader = [a for a in drift if start - 30 <= a.starts_at < next_start - 30]
    assert sorted(a.rank for a in loader) == [0, 1], [(a.rank, a.starts_at - start, a.summary) for a in drift]
    assert all(a.fired_at - start <= 60 and a.decided == "job" and a.evidence["name"] == "data-loader wait"
               for a in loader), [(a.rank, a.fired_at - start, a.decided, a.evidence) for a in loader]


def test_evidence_blocks_carried_over_a_restart_read_back_and_bad_ones_are_left_out():
    """:meth:`RankEvidence.saved_blocks` round-trips through JSON into a fresh rank's rings (the
    last 150 s, every third block); columns that do not read (a count, a length, a value not
    finite or negative, a string, times not rising) leave that ring empty; rings that already hold
    blocks are not touched."""
    import json

    from stepwatch.collector.detect._evidence import RankEvidence

    ev = RankEvidence()
    t0 = 1_000.0
    for i in range(100):  # 100 steps a block, 5 s blocks
        ends = [t0 + i * 5.0 + j * 0.05 for j in range(100)]
        ev.steps(ends, [0.001] * 100)
        ev.phase_samples(ends[::20], [15] * 5, [[0.001] * 5, [0.01] * 5, [0.02] * 5, [0.001] * 5, [0.005] * 5],
                         [[0.002] * 5, [0.009] * 5, [0.021] * 5, [0.001] * 5, [0.004] * 5])
        ev.allocator([ends[0]], [float(i)])
        ev.gpu([ends[0]], [0.7])
    saved = json.loads(json.dumps(ev.saved_blocks()))
    assert set(saved) == {"waits", "phases", "alloc", "busy"}
    back = RankEvidence()
    back.restore_blocks(saved)
    for name in ("waits", "phases", "alloc", "busy"):
        ring, old = getattr(back, name), list(getattr(ev, name))
        kept = [r for r in old if r[0] > old[-1][0] - 150.0][::-3][::-1]
        assert len(ring) == len(kept) >= 9, (name, len(ring), len(kept))
        assert [r[0] for r in ring] == [round(r[0], 3) for r in kept]
    assert list(back.phases)[-1][3:8] == (0.001, 0.01, 0.02, 0.001, 0.005)
    for bad in ({"waits": saved["waits"][:2]},                                      # a column short
                {"waits": [saved["waits"][0], saved["waits"][1][:-1], saved["waits"][2]]},  # lengths differ
                {"waits": [saved["waits"][0], [float("nan")] + saved["waits"][1][1:], saved["waits"][2]]},
                {"waits": [saved["waits"][0], ["x"] + saved["waits"][1][1:], saved["waits"][2]]},
                {"waits": [saved["waits"][0][::-1], saved["waits"][1], saved["waits"][2]]},  # times falling
                {"waits": [saved["waits"][0], [-1.0] + saved["waits"][1][1:], saved["waits"][2]]},
                {"waits": "junk"}, "junk", None):
        fresh = RankEvidence()
        fresh.restore_blocks(bad)
        assert not len(fresh.waits), bad
    back.restore_blocks({"waits": [[5_000.0], [0.5], [3]]})  # (its rings hold blocks: untouched)
    assert list(back.waits)[-1][0] != 5_000.0


def test_source_spreads_carried_over_a_restart_stand_in_only_while_the_blocks_cannot_measure():
    """:class:`SourceNoise`'s saved spreads round-trip through JSON; one that does not read is left
    out; a run of ``n`` blocks takes the spread of the longest saved run no longer than ``n``;
    once the rank's own blocks measure the source, they decide. A spread measured at a save is
    saved and never read before a restart."""
    import json

    from stepwatch.collector.detect._evidence_noise import SourceNoise

    rng = random.Random(7)
    before = SourceNoise(5.0)
    steady = [(5.0 * i, 0.010 * math.exp(rng.gauss(0, 0.1))) for i in range(1, 200)]
    measured = before.spread(("phase", (1,), 15), 6, 1000.0, 0.05, lambda: steady, tuple)
    assert measured is not None and measured > 0.005 * 0.05  # (over the floor: the series' own)
    saved = json.loads(json.dumps(before.saved()))
    assert saved == [[["phase", [1], 15], 6, measured]]

    after = SourceNoise(5.0)
    after.restore(saved + [[["phase", [2], 15], "six", 0.1], [["loader"], 6, float("nan")], "junk", [[3], 6, 0.1],
                           {"key": 1}, None, [["phase", [[[1]]], 15], 6, 0.1], [["phase", [1], 15, 4], 6, 0.1]])
    few = steady[-12:]  # 12 blocks since the restart: too few to measure
    key = ("phase", (1,), 15)
    assert after.spread(key, 5, 1000.0, 0.05, lambda: few, tuple) is None  # (no saved run of 5 or fewer)
    assert after.spread(key, 8, 1000.0, 0.05, lambda: few, tuple) == measured
    assert after.spread(("phase", (2,), 15), 8, 1000.0, 0.05, lambda: few, tuple) is None
    assert after.spread(("loader",), 8, 1000.0, 0.05, lambda: few, tuple) is None
    assert after.saved() == saved  # (still carried: its blocks could not measure it yet)
    # measured at a save when no spread of the source was measured over the last 30 minutes; a
    # try on too few blocks is tried again a minute later; neither changes what spread() reads
    at_save = SourceNoise(5.0)
    assert at_save.due(key, 1000.0)
    at_save.measure_for_restart(key, 6, 1000.0, lambda: few, tuple)
    assert not at_save.due(key, 1050.0) and at_save.due(key, 1070.0) and at_save.saved() == []
    at_save.measure_for_restart(key, 6, 1000.0, lambda: steady, tuple)
    assert at_save.saved() == saved and not at_save.due(key, 2700.0) and at_save.due(key, 2900.0)
    assert at_save.spread(key, 6, 1000.0, 0.05, lambda: few, tuple) is None
    own = [(1000.0 + 5.0 * i, 0.010 * math.exp(rng.gauss(0, 0.2))) for i in range(40)]  # its own, louder
    live = after.spread(key, 8, 1205.0, 0.05, lambda: own, tuple)
    assert live is not None and live != measured


def test_step_spreads_carried_over_a_restart_are_never_lowered_by_a_shorter_history():
    """A drift detector's spreads restored after a restart stand as a floor while the restarted
    history holds fewer rows than they were measured over (a wandering host's medians spread
    less over a few minutes than over half an hour: tests/data/real/h200zw, below). Once the
    history is as long, its own measurement decides, as it would have without the restart."""
    from stepwatch.collector._ring import Ring
    from stepwatch.collector.detect._drift_noise import Noise

    n, ratio = {"critical": 6, "warning": 18, "info": 48}, {"critical": 0.1, "warning": 0.05, "info": 0.03}
    rng = random.Random(1)
    levels = [rng.choice((-0.07, 0.0, 0.07)) for _ in range(5)]  # the host's level every 80 buckets
    rows = [(i, 5.0 * i, levels[i // 80] + rng.gauss(0, 0.04), 1) for i in range(400)]
    hist, short = Ring("Qddd", 400, rows), Ring("Qddd", 400, rows[-60:])  # (five minutes of it)
    whole = Noise(3.0, n, 360, ratio)
    whole.update(hist)
    fresh = Noise(3.0, n, 360, ratio)
    fresh.update(short)
    assert fresh.spreads["warning"] < whole.spreads["warning"], (fresh.spreads, whole.spreads)

    restored = Noise(3.0, n, 360, ratio)
    restored.carry(whole.spreads, whole.rows)
    restored.update(short)
    assert restored.spreads == whole.spreads and restored.rows == whole.rows
    assert restored.reach["warning"] > fresh.reach["warning"]
    quiet = Ring("Qddd", 400, [(i, 5.0 * i, rng.gauss(0, 0.005), 1) for i in range(400)])
    restored.update(quiet)  # as much history as before the restart: its own measurement decides
    alone = Noise(3.0, n, 360, ratio)
    alone.update(hist)
    alone.update(quiet)
    assert restored.spreads == alone.spreads and restored.spreads["warning"] < whole.spreads["warning"] / 2
    # measured over more rows than the history keeps (a noise_history_s longer than it): a full
    # history lifts the floor
    longer = Noise(3.0, n, 5000, ratio)
    longer.carry(whole.spreads, 5048)
    longer.update(quiet)
    assert longer.spreads["warning"] < whole.spreads["warning"] / 2, longer.spreads


def test_a_saved_row_count_that_does_not_read_leaves_the_state_unrestored_or_unfloored():
    """``noise_rows`` from a damaged state file (Infinity, text, a negative count) never raises
    into the caller: a count that does not read leaves the rank to settle afresh, a count of
    none or fewer keeps no floor."""
    import json

    from stepwatch.collector.detect._drift import DriftDetector

    cfg = parse_detection(None).drift
    base = {"v": 1, "settled": -3.2, "settled_at": T0, "noise": {"critical": 0.01}}
    for rows in ("Infinity", '"many"', "[3]"):
        d = DriftDetector(cfg, "j", 0)
        d.restore(json.loads(json.dumps(base)[:-1] + ', "noise_rows": ' + rows + "}"))
        assert not d.armed, rows
    d = DriftDetector(cfg, "j", 0)
    d.restore(dict(base, noise_rows=-5))
    assert d.armed and d._noise._carried is None


def test_the_settled_wait_is_saved_and_one_that_does_not_read_or_belong_is_left_out():
    """The loader's wait while the rank settled (``ShiftTests.since_settled``'s level) goes with
    the drift state and comes back; one from a damaged file (text, NaN, negative, the wrong
    length) or from another settling (its time is not the saved ``settled_at``) is left out, the
    rest of the state restored."""
    import json

    from stepwatch.collector.detect._drift import DriftDetector

    cfg = parse_detection(None).drift
    base = {"v": 1, "settled": -3.2, "settled_at": T0, "noise": {"critical": 0.01}}
    d = DriftDetector(cfg, "j", 0)
    d.restore(dict(base, settled_wait=[T0, 0.0004]))
    assert d.armed and d._t._settled_wait == (T0, 0.0004)
    again = DriftDetector(cfg, "j", 0)
    again.restore(json.loads(json.dumps(d.state())))
    assert again._t._settled_wait == (T0, 0.0004)
    for bad in ('"x"', "[1]", "[%r, NaN]" % T0, "[%r, -0.1]" % T0, "[%r, 0.0004]" % (T0 - 60), "null"):
        d = DriftDetector(cfg, "j", 0)
        d.restore(json.loads(json.dumps(base)[:-1] + ', "settled_wait": ' + bad + "}"))
        assert d.armed and d._t._settled_wait is None, bad



def test_the_settled_beyond_host_levels_are_saved_and_ones_that_do_not_read_or_belong_are_left_out():
    """The launch-paced phases' device time beyond their host time while the rank settled
    (``ShiftTests.since_settled``'s other levels) go with the drift state and come back; ones from
    a damaged file (text, NaN, a column not a compute phase's, none at all, the wrong shape) or
    from another settling are left out, the rest of the state restored."""
    import json

    from stepwatch.collector.detect._drift import DriftDetector

    cfg = parse_detection(None).drift
    base = {"v": 1, "settled": -4.4, "settled_at": T0, "noise": {"critical": 0.01}}
    d = DriftDetector(cfg, "j", 0)
    d.restore(dict(base, settled_beyond=[T0, 15, [[1, 0.00002], [2, -0.00001]]]))
    assert d.armed and d._t._settled_beyond == (T0, (15, {1: 0.00002, 2: -0.00001})), d._t._settled_beyond
    again = DriftDetector(cfg, "j", 0)
    again.restore(json.loads(json.dumps(d.state())))
    assert again._t._settled_beyond == (T0, (15, {1: 0.00002, 2: -0.00001}))
    for bad in ('"x"', "[1]", "[%r, 15, [[1, NaN]]]" % T0, "[%r, 15, [[3, 0.0]]]" % T0, "[%r, 15, []]" % T0,
                "[%r, 15, [[1]]]" % T0, "[%r, 15, [[1, 0.0]]]" % (T0 - 60), "null"):
        d = DriftDetector(cfg, "j", 0)
        d.restore(json.loads(json.dumps(base)[:-1] + ', "settled_beyond": ' + bad + "}"))
        assert d.armed and d._t._settled_beyond is None, bad


def test_the_evidence_a_slow_change_was_raised_on_is_saved_through_a_further_change():
    """A slow change's episode (raised on its evidence since the rank settled) that took a
    further onset keeps the evidence it was raised on, which ``ShiftTests.slow_holds`` reads: a
    restarted collector takes it up (one that does not read leaves the latest onset's; an
    episode not saved as slow has none)."""
    import json

    from stepwatch.collector.detect._drift import DriftDetector

    cfg = parse_detection(None).drift
    beyond = {"kind": "beyond host", "name": "backward", "before": 0.02, "after": 0.33, "unit": "ms",
              "share": 0.57, "spreads": 5.5, "host_paced": False}
    later = dict(beyond, kind="phase", before=5.6, after=5.9, share=0.6)
    ep = {"alertname": "StepwatchThroughputDrift", "severity": "warning", "ref": math.log(0.0118),
          "ref_text": "vs this job's level settled at 17:45 UTC", "onset": [61475, T0 + 600],
          "raised": math.log1p(0.04), "ratio": 1.04, "change": 1, "began": [51000, 0.035], "evidence": later,
          "unknown": [], "span": [T0 + 400, T0 + 580, 0.0118], "slow": True,
          "slow_held": {"evidence": beyond, "span": [T0 - 120, T0, 0.0118]}}
    state = {"v": 1, "settled": math.log(0.0118), "settled_at": T0, "noise": {"critical": 0.02}, "episode": ep}
    d = DriftDetector(cfg, "j", 0)
    d.restore(json.loads(json.dumps(state)))
    b, span = d._ep.slow
    assert (b.kind, b.name, b.after, span) == ("beyond host", "backward", 0.33, (T0 - 120, T0, 0.0118)), d._ep.slow
    saved = d.state()["episode"]
    assert saved["slow"] is True and saved["slow_held"]["evidence"]["kind"] == "beyond host", saved
    for bad, slow in (({"evidence": dict(beyond, name="nowhere"), "span": [T0 - 120, T0, 0.0118]}, True),
                      ({"evidence": beyond, "span": None}, True), (ep["slow_held"], False)):
        d = DriftDetector(cfg, "j", 0)
        d.restore(json.loads(json.dumps(dict(state, episode=dict(ep, slow_held=bad, slow=slow)))))
        assert d.condition is not None, bad
        want = None if not slow else ("phase", 5.9)
        assert (d._ep.slow and (d._ep.slow[0].kind, d._ep.slow[0].after)) == (want or None), (bad, d._ep.slow)


def test_the_evidence_an_episode_holds_through_a_further_change_is_saved_and_taken_up():
    """An open episode whose latest onset (a further change) nothing holds still ends once the
    job's change it was raised on has gone (``Episode.held``, tests/data/real/diag/h100p): a
    restarted collector takes that evidence up with the episode; one that does not read leaves
    the latest onset's (none)."""
    import json

    from stepwatch.collector.detect._drift import DriftDetector

    cfg = parse_detection(None).drift
    forward = {"kind": "phase", "name": "forward", "before": 5.05, "after": 7.17, "unit": "ms",
               "share": 1.3, "spreads": 9.0, "host_paced": True}
    state = {"v": 1, "settled": math.log(0.0129), "settled_at": T0, "noise": {"critical": 0.02},
             "episode": {"alertname": "StepwatchThroughputDrift", "severity": "critical",
                         "ref": math.log(0.0129), "ref_text": "vs this job's level settled at 10:08 UTC",
                         "onset": [18727, T0 + 75], "raised": math.log1p(0.309), "ratio": 1.309, "change": 1,
                         "began": [15028, 0.086], "evidence": None, "unknown": [], "span": None,
                         "held": {"evidence": forward, "span": [T0 - 140, T0 + 10, 0.0129]}}}
    d = DriftDetector(cfg, "j", 0)
    d.restore(json.loads(json.dumps(state)))
    assert d.condition is not None and d.condition.change == 1 and d._ep.backing is None, d.condition
    held, span = d._ep.held
    assert (held.name, held.before, held.after, span) == ("forward", 5.05, 7.17, (T0 - 140, T0 + 10, 0.0129))
    again = DriftDetector(cfg, "j", 0)
    again.restore(json.loads(json.dumps(d.state())))
    assert again._ep.held == d._ep.held
    for bad in ({"evidence": dict(forward, before="NaN"), "span": [0, 1, 2]}, {"evidence": forward, "span": [1]},
                "forward"):
        d = DriftDetector(cfg, "j", 0)
        d.restore(json.loads(json.dumps(dict(state, episode=dict(state["episode"], held=bad)))))
        assert d.condition is not None and d._ep.held is None, bad


def test_a_restart_inside_a_change_never_lets_the_host_open_an_episode_that_folds_the_next_one(tmp_path):
    """The held-out launch-bound h200zw (one H200, its 10 s medians 0.85-1.22x) with four +10%
    pulses (backward, the loader's wait, forward, optimizer), the collector restarted 130 s into
    the loader's. The restarted history held five minutes when the step spreads were measured
    again: the warning spread fell from 13.8% to 4.5%, a +5.3% of the host's pace with no
    evidence was raised a warning (onset in forward's pulse, raised 60 s before the optimizer's),
    and the optimizer pulse, +6% over the settled level, folded into it and was never raised on
    its own. With the spreads carried as a floor: no episode of the host's, and the optimizer
    pulse raised in its own episode, decided by the optimizer, within 60 s (35 s, as with no
    restart). (The forward pulse's own episode, decided by the device's work, is raised 108 s
    after it began, as with a restart 45-100 s into the loader's: a change of the job, not the
    host's.)"""
    spans, drift = _pulses_restarted("h200zw_1gpu_s.jsonl.gz", ("backward", "loader", "forward", "optimizer"),
                                     1, 130, tmp_path)
    l_end, o_start = spans[1][1], spans[3][0]
    unheld = [a for a in drift if l_end + 120 < a.starts_at < o_start - 30 and a.decided != "job"]
    assert not unheld, [(a.starts_at - o_start, a.summary) for a in unheld]
    opt = [a for a in drift if o_start - 30 <= a.starts_at]
    assert len(opt) == 1 and opt[0].fired_at - o_start <= 60, [(a.starts_at - o_start, a.summary) for a in drift]
    assert opt[0].decided == "job" and opt[0].evidence["name"] == "optimizer", (opt[0].decided, opt[0].evidence)


def test_healthy_wandering_jobs_restarted_anywhere_raise_nothing(tmp_path):
    """Two held-out healthy recordings whose hosts wander (the launch-bound 1 x H200 h200zw, its
    10 s medians 0.85-1.22x; the 2 x H200 h200zb), the collector restarted at 240, 330 and 420 s
    of data: the restarted collector, its settled levels, noises, waves and the evidence's spreads
    restored, raises nothing, as with no restart."""
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, first_step_time, load

    for name in ("h200zw_1gpu_s.jsonl.gz", "h200zb_2gpu_m.jsonl.gz"):
        lines = load(str(pathlib.Path(__file__).parents[2] / "data" / "real" / name))
        evs, t0 = list(events(lines)), first_step_time(lines)
        for at in (240.0, 330.0, 420.0):
            before, after = _replayed_with_a_restart(evs, DetectionConfig(), t0 + at, tmp_path / f"{name}-{at:.0f}")
            raised = [(a.alertname, a.rank, round(a.starts_at - t0)) for a in before + after]
            assert not raised, (name, at, raised)


def test_a_stopping_collector_saves_every_ranks_state_as_it_is_now(start_collector, tmp_path):
    """A collector stopped (SIGTERM) saves each armed rank's state as it is, changed since its last
    save or not: the evidence blocks it carries reach the last block, not up to a minute earlier
    (a quiet rank's state is saved on the tick only when it changes: once a minute)."""
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))
    from collector_testlib import Stream, batch, hello
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    state_dir = str(tmp_path / "state")
    col = start_collector(state_dir=state_dir)
    chan = col.channel()
    rng, t, n = random.Random(7), T0, 0
    stream = Stream(chan, hello(world_size=1))
    for seq in range(1, 41):  # 40 batches of 200 steps of ~40 ms: 320 s of data, armed at 180 s
        steps = []
        for _ in range(200):
            n += 1
            d = 0.04 * math.exp(rng.gauss(0, 0.01))
            t += d
            steps.append(agent_pb2.StepRecord(step=n, end_time_s=t, duration_s=d, dataloader_wait_s=0.001,
                                              clock=agent_pb2.STEP_CLOCK_CUDA_EVENT))
        stream.send(batch(seq, steps=steps))
    stream.close()
    chan.close()
    rank = col.collector.detection.engine.drift_of("j", 0)
    assert rank.median._settled is not None, "not armed"
    last = col.loop.call(_last_block(rank))
    col.loop.call(col.collector.stop(grace_s=0))
    store = DriftStore(state_dir)
    saved = store.load("j", 0)
    store.close()
    assert abs(saved["blocks"]["waits"][0][-1] - last) < 0.01, (saved["blocks"]["waits"][0][-1], last)


async def _last_block(rank) -> float:
    """The start of the rank's newest loader-wait block, read on the collector's loop."""
    return rank._evidence.waits[-1][0]


def test_ranks_that_arm_together_are_saved_over_the_next_ticks_none_left_out(tmp_path, monkeypatch):
    """A tick saves at most its share of changed states (``SAVE_PER_TICK``, here shrunk to 3);
    the states it left are saved by the next ticks, and a collector that stops saves every armed
    rank at once."""
    monkeypatch.setattr(_drift_rule, "SAVE_PER_TICK", 3)
    store = DriftStore(str(tmp_path))
    engine = DetectionEngine(parse_detection({"warmup_steps": 0, "drift": {"warmup_s": 5, "settle_s": 10}}), store)
    saved = []
    real_save = store.save
    store.save = lambda job, rank, state: (saved.append(rank), real_save(job, rank, state))
    for rank in range(7):
        now = T0
        steps = list(range(1, 801))
        times = [T0 + 0.04 * s for s in steps]
        engine.feed("j", rank, Steps(steps, times, [0.04] * 800, [0.0] * 800))
        now = times[-1]
    engine.tick(now)
    assert all(engine.armed()[("j", r)] for r in range(7))
    ticks = []
    for _ in range(4):
        before = len(saved)
        for _slice in engine.drift.save_slices(2):
            pass
        ticks.append(sorted(saved[before:]))
    assert ticks == [[0, 1, 2], [3, 4, 5], [6], []], ticks
    engine.save(now, force=True)
    assert sorted(saved[-7:]) == list(range(7))
    store.close()
    again = DriftStore(str(tmp_path))
    assert all(again.load("j", r) is not None for r in range(7))


def test_a_slow_loader_episode_stays_open_across_a_restart(tmp_path):
    """The held-out launch-bound h200zw played six times, its loader's wait ramped to +5% of the
    step over 15 minutes from 270 s (test_real_corpus's slow loader ramp), the collector restarted
    3 minutes after that slow change was raised: the restarted rank's episode goes on with its
    onset, decided by the wait, and stays open to the end while the wait stays grown (the
    episode's ``slow`` is saved: without it the restarted episode resolved as the host's pace
    dipped the step, though the wait was still grown)."""
    from stepwatch.collector.detect import DetectionConfig

    evs, at, slow = _slow_loader_ramp(tmp_path)
    assert len(slow) == 1, [a.fired_summary for a in slow]
    before, after = _replayed_with_a_restart(evs, DetectionConfig(), slow[0].fired_at + 180, tmp_path / "r")
    going = [a for a in after if a.alertname == "StepwatchThroughputDrift" and abs(a.onset - slow[0].onset) < 1]
    assert len(going) == 1 and going[0].ends_at is None and going[0].decided == "job", [
        (a.onset - slow[0].onset, a.ends_at, a.summary) for a in after]
    assert [a for a in after if a.alertname == "StepwatchThroughputDrift" and a.onset > slow[0].onset + 1] == []
