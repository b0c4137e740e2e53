"""The collector's garbage-collection policy (collector/_gcstats.py): long-lived objects are
frozen out of collections every tick and collected together every ``every_s``."""

from __future__ import annotations

import gc
import weakref

from stepwatch.collector._gcstats import GC_STATS, GcFreezer, install


class _Node:
    pass


def test_a_cycle_frozen_by_a_tick_waits_for_the_full_collection():
    now = [0.0]
    freezer = GcFreezer(60.0, clock=lambda: now[0])
    install()
    try:
        node = _Node()
        node.me = node  # a reference cycle: only a collection frees it
        ref = weakref.ref(node)
        freezer.tick()
        assert gc.get_freeze_count() > 0
        del node
        gc.collect()
        assert ref() is not None  # frozen: collections do not look at it
        now[0] = 30.0
        freezer.tick()
        assert ref() is not None
        full_before = GC_STATS.count[2]
        now[0] = 61.0
        freezer.tick()  # every_s passed: unfrozen, collected, the rest frozen again
        assert ref() is None and freezer.last_freed >= 1
        assert GC_STATS.count[2] == full_before + 1
        assert gc.get_freeze_count() > 0
    finally:
        freezer.stop()
    assert gc.get_freeze_count() == 0


def test_young_garbage_is_collected_before_a_tick_freezes():
    freezer = GcFreezer(3600.0)
    try:
        node = _Node()
        node.me = node
        ref = weakref.ref(node)
        del node
        freezer.tick()  # collects the young generations first: the cycle is not frozen
        assert ref() is None
    finally:
        freezer.stop()


def test_every_s_zero_leaves_pythons_collector_alone():
    freezer = GcFreezer(0.0)
    freezer.tick()
    freezer.stop()
    assert gc.get_freeze_count() == 0


def test_a_running_collector_sets_its_thread_switch_interval_and_gives_it_back(start_collector):
    """In its own process (process_wide), gil_switch_interval_s holds while the collector runs (gRPC's poller thread hands the
    loop every event under the GIL); stop() restores Python's."""
    import sys

    before = sys.getswitchinterval()
    running = start_collector(process_wide=True, gil_switch_interval_s=0.0002)
    assert abs(sys.getswitchinterval() - 0.0002) < 1e-6  # (kept in microseconds)
    running.loop.call(running.collector.stop(grace_s=0))
    assert abs(sys.getswitchinterval() - before) < 1e-6


def test_stream_churn_brings_the_full_collection_forward_but_not_too_often():
    """A cycle frozen by a tick is freed early once churn_streams streams began since the last
    full collection, no sooner than churn_min_s after it; without churn it waits for every_s."""
    now = [0.0]
    freezer = GcFreezer(3600.0, clock=lambda: now[0], churn_streams=200, churn_min_s=1.0)
    try:
        freezer.tick(streams=0)
        node = _Node()
        node.me = node
        ref = weakref.ref(node)
        now[0] = 0.5
        freezer.tick(streams=10)  # frozen while alive
        del node
        now[0] = 1.5
        freezer.tick(streams=150)  # churn_min_s passed, but under 200 streams since: no
        assert ref() is not None and freezer.early == 0
        freezer.tick(streams=260)
        assert ref() is None and freezer.early == 1 and freezer.last_full_s > 0
        node = _Node()
        node.me = node
        ref = weakref.ref(node)
        now[0] = 1.6
        freezer.tick(streams=300)
        del node
        now[0] = 2.0
        freezer.tick(streams=900)  # 600 streams since, but under churn_min_s since the last: no
        assert 20 * freezer.last_full_s < 598, freezer.last_full_s
        assert ref() is not None and freezer.early == 1
        now[0] = 600.0  # (past 20 x the last full collection's duration, however slow this machine)
        freezer.tick(streams=900)
        assert ref() is None and freezer.early == 2
    finally:
        freezer.stop()
