"""Alert lifecycle (pending -> firing -> resolved, de-duplicated by alertname/job/rank), the
``stepwatch_alert_active`` Prometheus metric, and the ``/api/alerts`` document.

``AlertBook.update(now, conditions)`` is called by one thread at a time (the collector's event
loop, or replay); ``snapshot`` may be called from any thread (a scrape). Times are Unix seconds
passed in by the caller. A condition becomes a pending alert, fires once it has held for its
``for_s``, and resolves when it no longer holds (a pending one is dropped). A severity change
of a firing alert resolves the old labels and fires the new ones with the same start time.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import threading
from typing import Iterable, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..detect import Condition

__all__ = ["Alert", "AlertBook", "AlertMetrics", "iso"]


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


@dataclasses.dataclass
class Alert:
    alertname: str
    job: str
    rank: int
    severity: str
    summary: str
    state: str              # "pending", "firing" or "resolved"
    starts_at: float        # data time the condition started
    active_at: float        # when the book first saw it
    step: Optional[int] = None
    fired_at: Optional[float] = None
    ends_at: Optional[float] = None

    @property
    def key(self) -> tuple:
        return (self.alertname, self.job, self.rank)

    def labels(self) -> dict[str, str]:
        """Alertmanager labels; ``source`` tells these from the Prometheus rules' alerts of the
        same name (deploy/prometheus/rules carry source="prometheus")."""
        return {"alertname": self.alertname, "severity": self.severity, "training_job": self.job,
                "rank": str(self.rank), "source": "collector"}

    def to_json(self) -> dict:
        return {"alertname": self.alertname, "severity": self.severity, "job": self.job, "rank": self.rank,
                "state": self.state, "summary": self.summary, "step": self.step, "starts_at": iso(self.starts_at),
                "fired_at": iso(self.fired_at) if self.fired_at else None,
                "ends_at": iso(self.ends_at) if self.ends_at else None}


class AlertBook:
    """Live alerts keyed by (alertname, job, rank) plus resolved ones kept ``retention_s``."""

    def __init__(self, retention_s: float = 3600.0):
        self.retention_s = retention_s
        self._lock = threading.Lock()
        self._live: dict[tuple, Alert] = {}
        self._resolved: list[Alert] = []

    def update(self, now: float, conditions: Iterable[Condition]) -> list[Alert]:
        """Apply what holds at ``now``; return copies of the alerts that fired or resolved."""
        out: list[Alert] = []
        with self._lock:
            seen = set()
            for c in conditions:
                seen.add(c.key)
                self._apply(now, c, out)
            for key in [k for k in self._live if k not in seen]:
                a = self._live.pop(key)
                if a.state == "firing":
                    a.state, a.ends_at = "resolved", now
                    self._resolved.append(a)
                    out.append(dataclasses.replace(a))
            self._resolved = [a for a in self._resolved if now - a.ends_at <= self.retention_s]
        return out

    def _apply(self, now: float, c: Condition, out: list) -> None:
        a = self._live.get(c.key)
        if a is None:
            a = self._live[c.key] = Alert(c.alertname, c.job, c.rank, c.severity, c.summary, "pending",
                                          c.since, now, c.step)
        if a.state == "firing" and a.severity != c.severity:
            old = dataclasses.replace(a, state="resolved", ends_at=now)
            self._resolved.append(old)
            out.append(dataclasses.replace(old))
            a.fired_at = now
            out.append(dataclasses.replace(a, severity=c.severity, summary=c.summary))
        a.severity, a.summary = c.severity, c.summary
        if a.state == "pending" and now - a.active_at >= c.for_s:
            a.state, a.fired_at, a.step = "firing", now, c.step if c.step is not None else a.step
            out.append(dataclasses.replace(a))

    def snapshot(self) -> list[Alert]:
        """Copies of live then resolved alerts (any thread)."""
        with self._lock:
            return [dataclasses.replace(a) for a in (*self._live.values(), *self._resolved)]

    def firing(self) -> list[Alert]:
        return [a for a in self.snapshot() if a.state == "firing"]

    def json(self) -> bytes:
        return json.dumps({"alerts": [a.to_json() for a in self.snapshot()]}).encode()


class AlertMetrics(Collector):
    """``stepwatch_alert_active``: 1 per firing alert; with an Alertmanager ``client``,
    ``stepwatch_collector_alertmanager_alerts_total{outcome}`` (sent, failed, dropped).
    Registers itself on ``registry``."""

    def __init__(self, book: AlertBook, registry, client=None):
        self._book = book
        self._client = client
        registry.register(self)

    def collect(self):
        fam = GaugeMetricFamily("stepwatch_alert_active",
                                "1 for each firing stepwatch alert (pending and resolved ones are absent).",
                                labels=("alertname", "severity", "training_job", "rank"))
        for a in self._book.firing():
            fam.add_metric((a.alertname, a.severity, a.job, str(a.rank)), 1.0)
        yield fam
        if self._client is not None:
            sent = CounterMetricFamily(
                "stepwatch_collector_alertmanager_alerts",
                "Alert updates posted to Alertmanager (sent), given up after retries (failed), "
                "or dropped from the full send queue (dropped).", labels=("outcome",))
            for outcome in ("sent", "failed", "dropped"):
                sent.add_metric((outcome,), getattr(self._client, outcome))
            yield sent

    def describe(self):
        return []
