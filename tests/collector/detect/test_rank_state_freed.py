"""A rank's detection state is freed by reference counting when the rank goes (expired, or a new
run on it): it holds no reference cycle. The live collector freezes what survives each second
(collector/_gcstats.py) and runs its full collection hourly, or early under stream churn only, so
a cycle per rank would keep every churned rank's state until then, and the allocator's pools
it was spread over after it (bench/results/connection_churn_2core.md)."""

from __future__ import annotations

import gc
import random

from stepwatch.collector.detect import DetectionEngine
from stepwatch.collector.detect._run_record import RunIdentity
from stepwatch.collector.detect._types import AllocatorPoint, GpuPoint, HostPoint, WindowPoint


def _feed_a_rank(engine: DetectionEngine, job: str, rank: int, seconds: float, slower_from: float) -> None:
    rnd, t, step = random.Random(rank), 1_700_000_000.0, 0
    end = t + seconds
    next_sample = t
    while t < end:
        step += 1
        d = 0.04 * (1.3 if t - 1_700_000_000.0 > slower_from else 1.0) * (1 + rnd.gauss(0, 0.01))
        t += d
        engine.step(job, rank, step, t, d)
        if t >= next_sample:
            next_sample += 1.0
            engine.allocator(job, rank, AllocatorPoint(t, 2 << 30, 3 << 30, 1 << 20, 0, 0, 80 << 30))
            engine.gpu(job, rank, GpuPoint(t, 40 << 30, 80 << 30, 0, 1.98e9, 50.0))
            engine.host(job, rank, HostPoint(t, 4 << 30), available_bytes=100 << 30)
            if step % 1000 < 30:
                engine.window(job, rank, WindowPoint(t, step, 5, 0.03, 0.001, d))
        engine.tick(t) if step % 250 == 0 else None


def _detection_garbage(drop) -> list:
    """What the cyclic collector finds unreachable after ``drop()`` and is of this project."""
    gc.collect()
    gc.disable()
    try:
        drop()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found = [o for o in gc.garbage if type(o).__module__.startswith("stepwatch.")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return found


def test_an_expired_rank_with_an_open_episode_leaves_no_reference_cycle():
    engine = DetectionEngine()
    engine.connected("j", 0, RunIdentity(session="a", world=2), live=1, now=1_700_000_000.0)
    _feed_a_rank(engine, "j", 0, seconds=400, slower_from=300)
    assert engine.armed()[("j", 0)], "the rank armed"
    assert engine.conditions(), "the slowdown raised"  # the state holds an open episode
    garbage = _detection_garbage(lambda: engine.forget("j", 0))
    assert not garbage, sorted({type(o).__qualname__ for o in garbage})


def test_a_new_run_on_a_rank_frees_the_runs_state_before_it_without_a_cycle():
    engine = DetectionEngine()
    engine.connected("j", 1, RunIdentity(session="a", world=2), live=1, now=1_700_000_000.0)
    _feed_a_rank(engine, "j", 1, seconds=200, slower_from=1e9)
    assert engine.drift_of("j", 1) is not None
    garbage = _detection_garbage(
        lambda: engine.connected("j", 1, RunIdentity(session="b", world=2), live=1, now=1_700_000_300.0))
    assert engine.drift_of("j", 1) is None, "the new run starts afresh"
    assert not garbage, sorted({type(o).__qualname__ for o in garbage})


def test_the_collectors_state_of_a_real_job_is_freed_when_its_ranks_go():
    """A real 2 x H200 job (tests/data/real/h200zb_2gpu_m: phase times, allocator, NVML and host
    samples, alerts raised) replayed through the collector's Detection (the engine, the why's
    evidence, the alert book), then its ranks forgotten as the collector's expiry does: none of
    it is left in a reference cycle."""
    import pathlib

    from stepwatch.collector._replay import replay
    from stepwatch.collector.alerting import Detection
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, load

    cfg = DetectionConfig()
    det = Detection(cfg, log_changes=False)
    replay(events(load(str(pathlib.Path(__file__).parents[2] / "data" / "real" / "h200zb_2gpu_m.jsonl.gz"))), cfg,
           detection=det)
    keys = sorted(det.engine.rank_keys())
    assert len(keys) == 2, keys
    garbage = _detection_garbage(lambda: det.forget(keys))
    assert not det.engine.rank_keys()
    assert not garbage, sorted({type(o).__qualname__ for o in garbage})
