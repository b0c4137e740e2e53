"""Alert lifecycle (pending -> firing -> resolved, de-duplicated by alertname/job/rank), the
``stepwatch_alert_active`` Prometheus metric, and the ``/api/alerts`` document.

``AlertBook.update(now, conditions)`` is called by one thread at a time (the collector's event
loop, or replay); ``snapshot`` may be called from any thread (a scrape). Times are Unix seconds
passed in by the caller. A condition becomes a pending alert, fires once it has held for its
``for_s``, and resolves once it has been absent for the hold time (a pending one is dropped at
once). One change is one episode: a severity change updates the firing alert in place.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
import threading
from typing import Iterable, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..detect import Condition

__all__ = ["Alert", "AlertBook", "AlertMetrics", "iso", "unix"]


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def unix(text: str) -> float:
    """The Unix time of an :func:`iso` text (``Alert.earlier``'s times, the API's)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


_EARLIER_KEPT = 8  # further changes remembered per episode


@dataclasses.dataclass
class Alert:
    """One alert episode: raised once, updated in place (severity, summary, ratio), resolved
    once (``summary`` and ``ratio`` follow the condition: a resolved drift episode's last ratio
    is the level it came back to; ``fired_summary`` and ``peak_ratio`` keep what it was raised
    on and the most it reached). ``history`` is ``[(time, severity), ...]`` from the first
    firing on; ``raised_step`` the step the rank had reached when it fired; ``step`` the step
    the condition refers to (the estimated onset for drift). A further change inside the
    episode (``Condition.change`` moved, or the condition came back within the resolve hold
    with another onset) moves ``step`` and ``onset_at`` to the new onset and keeps what was
    raised before in ``earlier`` (its step and onset, severity and summary when it was raised
    and when it was superseded, its diagnosis, when); the diagnosis is then made again for the
    new onset."""

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
    ratio: Optional[float] = None
    raised_step: Optional[int] = None
    resolved_step: Optional[int] = None
    fired_summary: str = ""  # the summary it fired with (``summary`` follows the condition)
    peak_ratio: Optional[float] = None  # the largest ratio of the episode's condition
    history: list = dataclasses.field(default_factory=list)
    absent_since: Optional[float] = None  # condition gone, resolving once the hold has passed
    diagnosis: str = ""     # why (slowdown alerts): what changed between before and after onset
    diagnosis_complete: bool = False  # a profiler window after the onset was compared
    trace: str = ""         # the trace captured when it fired: request id, then host:path
    change: int = 0         # the condition's further-change count last applied
    onset_at: Optional[float] = None  # data time of the newest onset (starts_at until a further change)
    earlier: list = dataclasses.field(default_factory=list)
    onset_raised: tuple = ("", "")  # (severity, summary) when the newest onset was raised
    further: bool = False   # on the copies :meth:`AlertBook.update` returns: a further change
    decided: str = ""       # drift: "job" (its evidence held the shift), "steps" (the step times alone)
    evidence: Optional[dict] = None  # drift: the evidence at the newest onset (Backing's fields)
    found: tuple = ()       # what the rule found, by name (Condition.found: stragglers)

    @property
    def onset(self) -> float:
        return self.starts_at if self.onset_at is None else self.onset_at

    @property
    def key(self) -> tuple:
        return (self.alertname, self.job, self.rank)

    def labels(self) -> dict[str, str]:
        """Alertmanager labels, stable for the whole episode. Severity is an annotation, not a
        label: Alertmanager identifies an alert by its labels, so a severity label would turn
        every escalation into a second alert and a resolve of the first (two pages for one
        change). ``source`` tells these from the Prometheus rules' alerts of the same name."""
        return {"alertname": self.alertname, "training_job": self.job, "rank": str(self.rank),
                "source": "collector"}

    def to_json(self) -> dict:
        # The page shows the first 12 keys as columns: the diagnosis is among them.
        return {"alertname": self.alertname, "severity": self.severity, "job": self.job, "rank": self.rank,
                "state": self.state, "summary": self.summary, "diagnosis": self.diagnosis, "trace": self.trace,
                "step": self.step,
                "raised_step": self.raised_step, "starts_at": iso(self.starts_at),
                "fired_at": iso(self.fired_at) if self.fired_at else None,
                "ends_at": iso(self.ends_at) if self.ends_at else None, "ratio": self.ratio,
                "resolved_step": self.resolved_step, "raised_summary": self.fired_summary,
                "peak_ratio": self.peak_ratio,
                "severity_history": [[iso(t), sev] for t, sev in self.history],
                "onset_at": iso(self.onset), "earlier": [dict(e) for e in self.earlier],
                "decided": self.decided, "evidence": dict(self.evidence) if self.evidence else None}


class AlertBook:
    """Live alert episodes keyed by (alertname, job, rank) plus resolved ones kept
    ``retention_s``. A condition that disappears resolves its firing alert only after
    ``hold_s`` without it; if it comes back within the hold, the episode goes on (no flap).
    ``steps(job, rank)`` gives the rank's latest step (for raise and resolve steps)."""

    def __init__(self, retention_s: float = 3600.0, hold_s: float = 0.0, steps=lambda job, rank: None):
        self.retention_s = retention_s
        self.hold_s = hold_s
        self._steps = steps
        self._lock = threading.Lock()
        self._live: dict[tuple, Alert] = {}
        self._resolved: list[Alert] = []
        self._moving: set[tuple] = set()  # keys of pending alerts and of firing ones gone absent

    def update(self, now: float, conditions: Iterable[Condition]) -> list[Alert]:
        """Apply what holds at ``now`` (every condition); return copies of the alerts that
        fired, changed severity, or resolved (state "firing" for the first two)."""
        out: list[Alert] = []
        with self._lock:
            seen = set()
            for c in conditions:
                seen.add(c.key)
                self._apply(now, c, out)
            for key in [k for k in self._live if k not in seen]:
                self._absent(now, key, out)
            self._resolved = [a for a in self._resolved if now - a.ends_at <= self.retention_s]
        return out

    def update_keys(self, now: float, keys: Iterable[tuple], current) -> list[Alert]:
        """:meth:`update` for the conditions whose ``keys`` came, changed or went since the last
        update (``current(key)``: the condition now, or None), without walking every condition:
        the alerts that can move with time alone (pending ones, firing ones whose condition is
        absent) are re-judged too, so the result is what :meth:`update` over every condition
        gives (tests/collector/alerting/test_alerts.py). Resolved alerts past their retention leave
        at the next full update."""
        out: list[Alert] = []
        with self._lock:
            for key in sorted(self._moving.union(keys)):
                c = current(key)
                if c is not None:
                    self._apply(now, c, out)
                elif key in self._live:
                    self._absent(now, key, out)
        return out

    def _absent(self, now: float, key: tuple, out: list) -> None:
        a = self._live[key]
        if a.state != "firing":
            del self._live[key]  # a pending one that ended early
            self._moving.discard(key)
            return
        a.absent_since = a.absent_since if a.absent_since is not None else now
        if now - a.absent_since >= self.hold_s:
            del self._live[key]
            self._moving.discard(key)
            a.state, a.ends_at = "resolved", now
            a.resolved_step = self._steps(a.job, a.rank)
            self._resolved.append(a)
            out.append(_copy(a))
        else:
            self._moving.add(key)

    def _apply(self, now: float, c: Condition, out: list) -> None:
        a = self._live.get(c.key)
        if a is None:
            a = self._live[c.key] = Alert(c.alertname, c.job, c.rank, c.severity, c.summary, "pending",
                                          c.since, now, c.step)
        # A condition back within the resolve hold with another onset is a new change of the
        # same episode (a drift episode that cleared and was raised again): kept like a further one.
        returned = a.absent_since is not None and c.since != a.onset
        a.absent_since = None
        rose = a.state == "firing" and a.severity != c.severity
        further = a.state == "firing" and (c.change != a.change or returned)
        if further:
            a.earlier.append({"step": a.step, "onset_at": iso(a.onset), "raised": a.onset_raised[1],
                              "raised_severity": a.onset_raised[0], "severity": a.severity,
                              "summary": a.summary, "diagnosis": a.diagnosis, "until": iso(now),
                              "decided": a.decided, "evidence": a.evidence})
            del a.earlier[:-_EARLIER_KEPT]
            a.step, a.onset_at, a.diagnosis, a.diagnosis_complete = c.step, c.since, "", False
            a.onset_raised = (c.severity, c.summary)
        a.change = c.change
        a.severity, a.summary, a.ratio = c.severity, c.summary, c.ratio
        a.decided, a.found = c.decided, c.found
        a.evidence = dataclasses.asdict(c.evidence) if c.evidence is not None else None
        if c.ratio is not None and (a.peak_ratio is None or c.ratio > a.peak_ratio):
            a.peak_ratio = c.ratio
        if a.state == "pending":
            a.step = c.step if c.step is not None else a.step
            if now - a.active_at >= c.for_s:
                a.state, a.fired_at, a.fired_summary = "firing", now, c.summary
                a.onset_raised = (c.severity, c.summary)
                a.raised_step = self._steps(a.job, a.rank)
                a.history.append((now, a.severity))
                out.append(_copy(a))
        elif rose or further:
            if rose:
                a.history.append((now, a.severity))
            out.append(dataclasses.replace(_copy(a), further=further))
        if a.state == "pending":
            self._moving.add(c.key)
        else:
            self._moving.discard(c.key)

    def annotate(self, key: tuple, **fields) -> Optional[Alert]:
        """Set ``diagnosis``, ``diagnosis_complete`` or ``trace`` of the live alert ``key``; a
        copy when something changed, else None."""
        with self._lock:
            a = self._live.get(key)
            if a is None or all(getattr(a, k) == v for k, v in fields.items()):
                return None
            for k, v in fields.items():
                setattr(a, k, v)
            return _copy(a)

    def snapshot(self) -> list[Alert]:
        """Copies of live then resolved alerts (any thread)."""
        with self._lock:
            return [_copy(a) for a in (*self._live.values(), *self._resolved)]

    def firing(self, rank: Optional[tuple] = None) -> list[Alert]:
        """Copies of the firing alerts, of one ``(job, rank)`` only when given (a fleet-wide
        alert storm would otherwise copy every alert for each rank's window batch)."""
        with self._lock:
            return [_copy(a) for a in self._live.values()
                    if a.state == "firing" and (rank is None or (a.job, a.rank) == rank)]

    def json(self) -> bytes:
        return json.dumps({"alerts": [a.to_json() for a in self.snapshot()]}).encode()


def _copy(a: Alert) -> Alert:
    return dataclasses.replace(a, history=list(a.history), earlier=list(a.earlier))


class AlertMetrics(Collector):
    """``stepwatch_alert_active``: 1 per firing alert; ``stepwatch_pauses_total`` and
    ``stepwatch_drift_armed_ranks`` and ``stepwatch_drift_reach_ratio`` from the engine; with an
    Alertmanager ``client``,
    ``stepwatch_collector_alertmanager_alerts_total{outcome}`` (sent, failed, dropped).
    Registers itself on ``registry``."""

    def __init__(self, book: AlertBook, registry, client=None, pauses=None, per_rank: bool = True,
                 armed=None, reach=None, runs=None, arming=None, store_failures=None):
        self._book, self._per_rank = book, per_rank
        self._client = client
        self._pauses = pauses  # () -> {(job, rank): {kind: count}}
        self._armed = armed  # () -> {(job, rank): bool}
        self._reach = reach  # () -> {(job, rank): {severity: ratio}}, armed ranks only
        self._runs = runs  # () -> {job: the live run's settled level over its previous run's}
        self._arming = arming  # () -> {(job, rank): (armed_at, last step time)}, ranks not armed
        self._store_failures = store_failures  # () -> failed reads and flushes of the drift state store
        registry.register(self)

    def collect(self):
        yield self._firing()
        for source, family in ((self._pauses, self._pause_family), (self._arming, self._arming_family),
                               (self._runs, self._runs_family), (self._armed, self._armed_family),
                               (self._reach, self._reach_family), (self._client, self._sent_family),
                               (self._store_failures, self._store_family)):
            if source is not None:
                yield family()

    def _firing(self):
        fam = GaugeMetricFamily("stepwatch_alert_active",
                                "1 for each firing stepwatch alert (pending and resolved ones are absent).",
                                labels=("alertname", "severity", "training_job", "rank"))
        for a in self._book.firing():
            fam.add_metric((a.alertname, a.severity, a.job, str(a.rank)), 1.0)
        return fam

    def _pause_family(self):
        pauses = CounterMetricFamily(
            "stepwatch_pauses", "Step-time outliers the drift detector recognised and left out, by "
            "kind: stall (one slow step), pause (a run of slow steps: evaluation, checkpoint), "
            "profiler (steps inside the agent's own profiler windows), or the kind the user or an "
            "integration marked (agent.pause(\"eval\"), agent.mark(\"checkpoint\")). Per rank "
            "with per-rank series full, else summed over the job's ranks.",
            labels=("training_job", "rank", "kind") if self._per_rank else ("training_job", "kind"))
        summed: dict = {}
        for (job, rank), kinds in sorted(self._pauses().items()):
            for kind, n in sorted(kinds.items()):
                if self._per_rank:
                    pauses.add_metric((job, str(rank), kind), n)
                else:
                    summed[job, kind] = summed.get((job, kind), 0) + n
        for key, n in sorted(summed.items()):
            pauses.add_metric(key, n)
        return pauses

    def _arming_family(self):
        arming = GaugeMetricFamily(
            "stepwatch_drift_armed_in_seconds", "Seconds of training, from its latest step, until the last "
            "of the job's ranks not armed yet arms its drift detector (warm-up and settling: slowdowns are "
            "judged after it). Absent once every rank is armed.", labels=("training_job",))
        left: dict = {}
        for (job, _rank), (at, last) in sorted(self._arming().items()):
            left[job] = max(left.get(job, 0.0), max(0.0, at - last))
        for job, s in sorted(left.items()):
            arming.add_metric((job,), s)
        return arming

    def _runs_family(self):
        runs = GaugeMetricFamily(
            "stepwatch_run_level_ratio", "The job's live run's settled step time over the settled step time "
            "of its run before (same job name, world size, tokens and samples per step): 1.08 is 8% "
            "slower. One series per job, once the run has settled and has a run before it.",
            labels=("training_job",))
        for job, ratio in sorted(self._runs().items()):
            runs.add_metric((job,), ratio)
        return runs

    def _armed_family(self):
        armed = GaugeMetricFamily(
            "stepwatch_drift_armed_ranks", "Ranks of the job whose drift detector is armed: past "
            "warm-up (detection.drift.warmup_s) and settling (settle_s), judging step time "
            "against the job's settled level. Before, no drift is raised.", labels=("training_job",))
        counts: dict = {}
        for (job, _rank), on in sorted(self._armed().items()):
            counts[job] = counts.get(job, 0) + (1 if on else 0)
        for job, n in sorted(counts.items()):
            armed.add_metric((job,), n)
        return armed

    def _reach_family(self):
        reach = GaugeMetricFamily(
            "stepwatch_drift_reach_ratio", "The smallest sustained step-time shift the drift "
            "detector raises at each severity at the job's own noise, as a ratio (0.08: +8%), "
            "over that severity's window (detection.drift.critical_window_s, ...): the median "
            "over the job's armed ranks. A shift under it is not raised; on a host whose speed "
            "wanders it can stand far above the severity's ratio.", labels=("training_job", "severity"))
        by_job: dict = {}
        for (job, _rank), sevs in sorted(self._reach().items()):
            for sev, ratio in sevs.items():
                by_job.setdefault((job, sev), []).append(ratio)
        for key, ratios in sorted(by_job.items()):
            reach.add_metric(key, statistics.median(ratios))
        return reach

    def _sent_family(self):
        sent = CounterMetricFamily(
            "stepwatch_collector_alertmanager_alerts",
            "Alert updates posted to Alertmanager (sent), given up after retries (failed), "
            "or dropped from the full send queue (dropped).", labels=("outcome",))
        for outcome in ("sent", "failed", "dropped"):
            sent.add_metric((outcome,), getattr(self._client, outcome))
        return sent

    def _store_family(self):
        fam = CounterMetricFamily(
            "stepwatch_collector_state_store_failures", "Reads and writes of the detection state file (state_dir: "
            "the drift state and the run records) that failed: a lock another process held, a full or read-only "
            "disk, a damaged file. Writes are tried again at the next flush.")
        fam.add_metric((), self._store_failures())
        return fam

    def describe(self):
        return []
