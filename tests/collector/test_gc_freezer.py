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
    """gil_switch_interval_s holds while the collector runs (gRPC's poller thread hands the
    loop every event under the GIL); stop() restores Python's."""
    import sys

    before = sys.getswitchinterval()
    running = start_collector(gil_switch_interval_s=0.0002)
    assert abs(sys.getswitchinterval() - 0.0002) < 1e-6  # (kept in microseconds)
    running.loop.call(running.collector.stop(grace_s=0))
    assert abs(sys.getswitchinterval() - before) < 1e-6


def test_automatic_collections_are_off_while_freezers_run_and_come_back_after_the_last():
    """The tick is the only young collection while a freezer runs; two freezers stopping in
    either order leave Python's collector as it was (on)."""
    assert gc.isenabled()
    a, b = GcFreezer(3600.0), GcFreezer(3600.0)
    try:
        a.tick()
        assert not gc.isenabled()
        b.tick()
        a.stop()
        assert not gc.isenabled()  # b still runs
        node = _Node()
        node.me = node
        ref = weakref.ref(node)
        del node
        b.tick()  # the tick still collects young cycles
        assert ref() is None
    finally:
        a.stop()
        b.stop()
    assert gc.isenabled()
    GcFreezer(0.0).tick()  # every_s 0: Python's schedule, untouched
    assert gc.isenabled()
