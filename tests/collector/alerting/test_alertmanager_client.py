"""AlertmanagerClient against the real prometheus-alertmanager binary: alerts arrive with their
labels and annotations, posts are retried while Alertmanager is down, and ``submit`` never
blocks the event loop (not even with Alertmanager unreachable and the queue full)."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from _alertmanager import AM, Alertmanager
from _procs import free_port
from stepwatch.collector.alerting import AlertBook, AlertmanagerClient
from stepwatch.collector.detect import Condition

pytestmark = pytest.mark.skipif(AM is None, reason="needs prometheus-alertmanager")


def firing(rank=0, name="StepwatchThroughputDrift"):
    book, now = AlertBook(), time.time()
    (a,) = book.update(now, [Condition(name, "job-a", rank, "critical", "step time +12.0% vs baseline",
                                       now - 60, 1234, 0.0)])
    return a


async def wait_alerts(am: Alertmanager, n: int, timeout_s: float = 20.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = await asyncio.to_thread(am.alerts)
        if len(got) >= n:
            return got
        await asyncio.sleep(0.2)
    raise AssertionError(f"Alertmanager has {len(got)} alert(s), expected {n}")


def test_alert_arrives_with_labels_and_annotations(tmp_path):
    am = Alertmanager(tmp_path)

    async def main():
        client = AlertmanagerClient(am.url, clock=time.time, resend_s=60.0)
        client.start()
        client.submit([firing()])
        got = await wait_alerts(am, 1)
        await client.stop()
        return got, client

    try:
        (alert,), client = asyncio.run(main())
    finally:
        am.stop()
    assert alert["labels"] == {"alertname": "StepwatchThroughputDrift",
                               "training_job": "job-a", "rank": "0", "source": "collector"}
    assert alert["annotations"] == {"summary": "step time +12.0% vs baseline", "severity": "critical",
                                    "step": "1234", "raised_step": ""}
    assert alert["status"]["state"] == "active"
    assert (client.sent, client.failed, client.dropped) == (1, 0, 0)


def test_posts_are_retried_until_alertmanager_comes_up_and_submit_never_blocks(tmp_path):
    port = free_port()
    state = {}

    async def main():
        client = AlertmanagerClient(f"http://127.0.0.1:{port}", clock=time.time, retries=30, timeout_s=1.0,
                                    backoff_s=0.1, backoff_max_s=0.5)
        client.start()
        t0 = time.perf_counter()
        client.submit([firing(rank=r) for r in range(3)])
        state["submit_s"] = time.perf_counter() - t0
        # The loop stays responsive while the client fails and backs off.
        lag = []
        for _ in range(10):
            t = time.perf_counter()
            await asyncio.sleep(0.05)
            lag.append(time.perf_counter() - t - 0.05)
        state["max_lag_s"] = max(lag)
        assert client.sent == 0
        am = await asyncio.to_thread(Alertmanager, tmp_path, port)
        try:
            got = await wait_alerts(am, 3)
        finally:
            am.stop()
        await client.stop()
        return got, client

    got, client = asyncio.run(main())
    assert sorted(a["labels"]["rank"] for a in got) == ["0", "1", "2"]
    assert client.sent == 3 and client.failed == 0
    assert state["submit_s"] < 0.01 and state["max_lag_s"] < 0.2, state


def test_unreachable_alertmanager_drops_after_retries_and_stop_is_bounded():
    port = free_port()
    state = {}

    async def main():
        client = AlertmanagerClient(f"http://127.0.0.1:{port}", clock=time.time, retries=2, backoff_s=0.05,
                                    backoff_max_s=0.1, queue_size=4)
        client.start()
        t0 = time.perf_counter()
        for r in range(10):
            client.submit([firing(rank=r)])
        state["submit_s"] = time.perf_counter() - t0
        deadline = time.monotonic() + 10
        while client.failed + client.sent < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        client.submit([firing(rank=99)])
        t0 = time.perf_counter()
        await client.stop(deadline_s=2.0)
        await client.stop()  # idempotent
        state["stop_s"] = time.perf_counter() - t0
        return client

    client = asyncio.run(main())
    assert state["submit_s"] < 0.01, state
    assert client.sent == 0 and client.dropped >= 5 and client.failed >= 4, vars(client)
    assert state["stop_s"] < 2.5, state
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1)
