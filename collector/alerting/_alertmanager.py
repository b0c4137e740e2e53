"""Push alerts to Alertmanager through its v2 HTTP API (``POST {url}/api/v2/alerts``).

``submit`` is called on the event loop thread and never blocks: it appends to a bounded queue
(the oldest entries are dropped when full, counted in ``dropped``). One asyncio task drains the
queue and posts in a worker thread (blocking urllib, ``timeout_s`` per try), retrying failed
posts up to ``retries`` times with jittered exponential backoff; a batch that still fails is
dropped (the periodic resend of firing alerts repairs the state). Alertmanager down therefore
never blocks ingest. ``stop`` is idempotent and waits at most ``deadline_s``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import urllib.request
from typing import Callable, Optional

from stepwatch.core.support import backoff_delay

from ._book import Alert, iso

__all__ = ["AlertmanagerClient", "payload"]

log = logging.getLogger("stepwatch.collector")

_MAX_BATCH = 256


def payload(alerts: list[Alert], now: float, resend_s: float, generator_url: str = "") -> list[dict]:
    """The v2 API body: firing alerts end 4 resend periods ahead (renewed by each resend)."""
    out = []
    for a in alerts:
        end = a.ends_at if a.state == "resolved" else now + 4 * resend_s
        item = {"labels": a.labels(), "startsAt": iso(a.starts_at), "endsAt": iso(end),
                "annotations": {"summary": a.summary, "severity": a.severity,
                                "step": "" if a.step is None else str(a.step),
                                "raised_step": "" if a.raised_step is None else str(a.raised_step)}}
        for name in ("diagnosis", "trace"):
            if getattr(a, name):
                item["annotations"][name] = getattr(a, name)
        if a.fired_summary and a.fired_summary != a.summary:  # (a resolved drift: its summary
            item["annotations"]["raised"] = a.fired_summary    # reads the level it came back to)
        if a.peak_ratio is not None:
            item["annotations"]["peak_ratio"] = f"{a.peak_ratio:.4f}"
        if generator_url:
            item["generatorURL"] = generator_url
        out.append(item)
    return out


def _post(url: str, body: bytes, timeout_s: float) -> None:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        resp.read()


class AlertmanagerClient:
    """``url``: Alertmanager base URL (``http://host:9093``); ``post`` is injectable for tests."""

    def __init__(self, url: str, *, timeout_s: float = 5.0, retries: int = 5, resend_s: float = 60.0,
                 queue_size: int = 1024, clock: Callable[[], float], generator_url: str = "",
                 post: Callable[[str, bytes, float], None] = _post, backoff_s: float = 0.5, backoff_max_s: float = 30.0):
        self.url = url.rstrip("/") + "/api/v2/alerts"
        self.timeout_s, self.retries, self.resend_s = timeout_s, retries, resend_s
        self._queue: collections.deque = collections.deque(maxlen=queue_size)
        self._clock, self._post, self._gen = clock, post, generator_url
        self._backoff, self._backoff_max = backoff_s, backoff_max_s
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self.sent = self.failed = self.dropped = 0

    @classmethod
    def from_settings(cls, settings, clock: Callable[[], float]) -> "AlertmanagerClient":
        """A client configured by the collector settings' ``alertmanager_*`` options."""
        return cls(settings.alertmanager_url, timeout_s=settings.alertmanager_timeout_s,
                   retries=settings.alertmanager_retries, clock=clock)

    def submit(self, alerts: list[Alert]) -> None:
        """Queue alerts for sending (event loop thread; never blocks)."""
        for a in alerts:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append(a)
        if alerts:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stepwatch-alertmanager")

    async def stop(self, deadline_s: float = 2.0) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        self._wake.set()
        try:
            await asyncio.wait_for(task, deadline_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            task.cancel()

    async def _run(self) -> None:
        while not self._stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            while self._queue and not self._stop.is_set():
                batch = [self._queue.popleft() for _ in range(min(_MAX_BATCH, len(self._queue)))]
                await self._send(batch)

    async def _send(self, batch: list[Alert]) -> None:
        body = json.dumps(payload(batch, self._clock(), self.resend_s, self._gen)).encode()
        for attempt in range(self.retries + 1):
            try:
                await asyncio.to_thread(self._post, self.url, body, self.timeout_s)
                self.sent += len(batch)
                return
            except Exception as exc:  # noqa: BLE001 - any failure of one post is retried, then dropped
                if attempt == self.retries or self._stop.is_set():
                    self.failed += len(batch)
                    log.warning("stepwatch collector: Alertmanager %s unreachable, %d alert(s) not sent: %s",
                                self.url, len(batch), exc)
                    return
                delay = backoff_delay(attempt, self._backoff, self._backoff_max)
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
