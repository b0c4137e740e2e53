"""Two live agent sessions claiming one (job, rank) raise StepwatchDuplicateRank (real gRPC);
a reconnect of the same session does not; the alert resolves once one session is gone."""

from __future__ import annotations

import time

from collector_testlib import Stream, batch, hello, step

from stepwatch.collector.detect import parse_detection


def dup_alerts(col):
    return [a for a in col.collector.detection.book.snapshot() if a.alertname == "StepwatchDuplicateRank"]


def test_two_sessions_as_one_rank_raise_the_duplicate_alert(start_collector):
    col = start_collector(detection=parse_detection({"resolve_hold_s": 0, "liveness": {"duplicate_for_s": 0}}))
    with col.channel() as chan:
        a = Stream(chan, hello(rank=1, session="sa", pid=100))
        a.send(batch(1, steps=[step(1)]))
        again = Stream(chan, hello(rank=1, session="sa", pid=100))  # a reconnect overlapping the old stream
        again.send(batch(2, steps=[step(2)]))
        assert dup_alerts(col) == []
        b = Stream(chan, hello(rank=1, session="sb", pid=200))  # a second process as rank 1
        b.send(batch(1, steps=[step(1)]))
        (alert,) = dup_alerts(col)
        assert alert.state == "firing" and alert.rank == 1
        assert "2 agent sessions report as rank 1 of job j" in alert.summary
        assert "pid 100" in alert.summary and "pid 200" in alert.summary
        a.close()  # the old stream of session sa ends; its reconnect still runs: still two sessions
        time.sleep(0.3)
        assert dup_alerts(col)[0].state == "firing"
        b.close()
        deadline = time.monotonic() + 5
        while dup_alerts(col)[0].state != "resolved":
            assert time.monotonic() < deadline, dup_alerts(col)
            time.sleep(0.05)
        again.close()


def test_a_short_overlap_stays_pending_for_duplicate_for_s(start_collector):
    """A process that learns its rank from torch.distributed after attach claims the launcher's
    rank for a moment, then reconnects as its own: pending for ``duplicate_for_s`` (30 s), it
    never fires."""
    col = start_collector(detection=parse_detection({"resolve_hold_s": 0}))
    with col.channel() as chan:
        a = Stream(chan, hello(rank=0, session="sa", pid=100))
        a.send(batch(1, steps=[step(1)]))
        b = Stream(chan, hello(rank=0, session="sb", pid=200))
        b.send(batch(1, steps=[step(1)]))
        (alert,) = dup_alerts(col)
        assert alert.state == "pending", alert
        b.close()
        deadline = time.monotonic() + 5
        while dup_alerts(col):
            assert time.monotonic() < deadline, dup_alerts(col)
            time.sleep(0.05)
        a.close()
