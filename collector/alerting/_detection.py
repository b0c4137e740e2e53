"""Detection as a pipeline listener: feeds applied batches to the DetectionEngine, judges
time-based rules on the housekeeping tick, keeps the AlertBook and hands changes to the
Alertmanager client.

One caller at a time: the collector's event loop thread (live) or the replay loop. ``now`` is
always passed in (the collector's clock live, the recording's clock in replay), so both give
the same alerts for the same data. A failure inside detection is logged once per kind of
error and never reaches ingest.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator, Optional

from stepwatch.core.contract import phase_name
from stepwatch.core.support import OnceLog
from stepwatch.proto.stepwatch.v1 import agent_pb2

from ..wire import SampleColumns, StepColumns
from ..detect import (GPU_THROTTLED, PROFILER_OVERHEAD, STRAGGLER_RANK, THROUGHPUT_DRIFT, DetectionConfig,
                      DetectionEngine, Phases, RunIdentity, Steps, WindowPoint)
from ..detect import GPU_BUSIER, OWN_WORK
from ..detect import TICK_SLICE
from ._alertmanager import AlertmanagerClient
from ._asks import Asks
from ._book import Alert, AlertBook, unix
from ..why import Evidence, against_others, diagnose

__all__ = ["Detection", "feed_batch"]

log = logging.getLogger("stepwatch.collector")

# Alerts about a rank getting slower get a diagnosis (what changed before/after the onset).
STRAGGLER = STRAGGLER_RANK
SLOWDOWNS = (THROUGHPUT_DRIFT, STRAGGLER, GPU_THROTTLED)
OVERHEAD = PROFILER_OVERHEAD
DIAGNOSED = SLOWDOWNS + (OVERHEAD,)  # (an overhead episode is diagnosed too: is it the job's own?)
_WHY_KEPT = 0.5  # a why made again replaces the one shown when it reads at least this share of its step change


def run_identity(hello: agent_pb2.Hello) -> RunIdentity:
    """What a Hello says about the agent's run (detect/ stays free of the wire types)."""
    return RunIdentity(session=hello.session_id, world=hello.world_size, host=hello.host, gpu=hello.gpu.name,
                       driver=hello.driver_version, torch=hello.torch_version, cuda=hello.cuda_version,
                       agent=hello.agent_version, attach_time_s=hello.attach_time_s,
                       settings=tuple(sorted(hello.config.items())))


def _trace_text(host: str, ref) -> str:
    """The alert's trace annotation: the collector's URL path once uploaded, else where it lies."""
    if ref.error or not ref.path:
        return f"error: {ref.error or 'no path reported'}"
    if ref.trace_id:
        return f"/api/traces/{ref.trace_id} (also {host}:{ref.path})"
    upload = f"; {ref.upload_error}" if ref.upload_error else ""
    return f"{host}:{ref.path}{upload}"


def feed_batch(engine: DetectionEngine, job: str, rank: int, batch: agent_pb2.Batch,
               steps: StepColumns, samples: SampleColumns) -> None:
    """Hand one batch (``steps``, ``samples``: the batch read as columns) to ``engine`` as the
    rules' columns (:meth:`DetectionEngine.feed`)."""
    p = steps.phase_times
    c = steps
    s = samples
    windows = []
    for w in batch.windows or ():  # (an empty repeated field: its truth is cheaper than its loop)
        n = w.last_step - w.first_step + 1 if w.last_step >= w.first_step > 0 else 0
        if n and w.breakdown.step_time_s > 0:
            windows.append(WindowPoint(w.start_time_s, w.first_step, n, w.compute_s, w.communication_s,
                                       w.breakdown.step_time_s))
    engine.feed(
        job, rank,
        Steps(c.step, c.end_time_s, c.duration_s, c.dataloader_wait_s, c.tokens) if len(c) else None,
        profiled=c.profiled, marks={i: phase_name(m) for i, m in c.phase.items()} if c.phase else None,
        phases=None if p is None else Phases(p.step, p.end_time_s, p.points, p.device, p.host,
                                             c.step[0] if len(c) else None),
        allocator=s.allocator if len(s.allocator) else None, gpu=s.gpu if len(s.gpu) else None,
        host=s.host if len(s.host) else None,
        events=[(e.time_s, e.kind, e.message) for e in batch.events] if batch.events else (),
        windows=windows)


class Detection:
    """Pipeline listener. ``client`` (optional) receives every alert change and, every
    ``client.resend_s``, the firing alerts again. ``log_changes`` logs each change (live; replay
    prints its own report)."""

    def __init__(self, cfg: DetectionConfig, client: Optional[AlertmanagerClient] = None,
                 log_changes: bool = True,
                 request_window: Optional[Callable[[str, int, str], bool]] = None,
                 request_trace: Optional[Callable[[str, int, int], Optional[str]]] = None,
                 store=None, runs=None):
        self.cfg = cfg
        self._log_changes = log_changes
        # (job, rank) -> {session_id: ["host pid N", open streams]} (a reconnect overlaps streams)
        self._live: dict[tuple, dict] = {}
        self._phase_blocks: dict[tuple, int] = {}  # (job, rank) -> phase blocks at the last diagnosis
        # ranks with a firing slowdown whose diagnosis still lacks a window after its onset: only
        # their window batches are checked (one set lookup per batch for everyone else)
        self._incomplete: set[tuple] = set()
        # alert key -> (onset, the largest step change in ms a why shown for that onset read,
        # the Diagnosis shown last)
        self._why_read: dict[tuple, tuple] = {}
        # (store: drift state kept across restarts; runs: the runs' records, _lineage.RunStore)
        self.engine = DetectionEngine(cfg, store, runs)
        self.book = AlertBook(cfg.resolved_retention_s, cfg.resolve_hold_s, steps=self.engine.last_step)
        self.asks = Asks(cfg, self.book, request_window, request_trace)  # windows and traces asked
        self.evidence = Evidence(cfg.straggler.block_steps)  # (one block size for stragglers and the why)
        self.client = client
        self._last_resend = 0.0
        self._once = OnceLog(log)

    # -- listener ---------------------------------------------------------------------------
    def on_connect(self, hello: agent_pb2.Hello, now: float) -> None:
        live = self._live.setdefault((hello.job, hello.rank), {})
        live.setdefault(hello.session_id, [f"{hello.host} pid {hello.pid}", 0, run_identity(hello)])[1] += 1
        self._run(hello.job, hello.rank, live, now)
        self._sessions(hello, live, now)

    def on_disconnect(self, hello: agent_pb2.Hello, now: float) -> None:
        live = self._live.get((hello.job, hello.rank), {})
        entry = live.get(hello.session_id)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del live[hello.session_id]
                self._run(hello.job, hello.rank, live, now)
        self._sessions(hello, live, now)
        if not live:
            self._live.pop((hello.job, hello.rank), None)

    def _run(self, job: str, rank: int, live: dict, now: float) -> None:
        """The rank's session, once it is the only one live (a rank's spooled batches of its
        run before may arrive under the old session beside the new one): a new run drops the
        why's blocks of the run before as the engine drops its detection state."""
        if len(live) != 1:
            return
        try:
            (ident,) = (entry[2] for entry in live.values())
            if self.engine.connected(job, rank, ident, 1, now):
                self._forget_own([(job, rank)])
        except Exception as exc:  # noqa: BLE001 - detection must never break ingest
            self._log(exc)

    def _sessions(self, hello: agent_pb2.Hello, live: dict, now: float) -> None:
        try:
            self.engine.sessions(hello.job, hello.rank, {s: entry[0] for s, entry in live.items()}, now)
            if self.engine.changed:
                self._update(now)
        except Exception as exc:  # noqa: BLE001 - detection must never break ingest
            self._log(exc)

    def on_batch(self, hello: agent_pb2.Hello, batch: agent_pb2.Batch, now: float,
                 steps: StepColumns, samples: SampleColumns) -> None:
        try:
            self.evidence.on_batch(hello, batch, now, steps, samples)
            for ref in batch.traces or ():
                key = self.asks.trace_alerts.pop(ref.request_id, None)
                if key is not None:
                    self.book.annotate(key, trace=_trace_text(hello.host, ref))
            feed_batch(self.engine, hello.job, hello.rank, batch, steps, samples)
            if len(steps):
                self.engine.received(hello.job, hello.rank, now)
            if batch.HasField("gpu"):  # the GPU became known after the Hello: the run's record
                self.engine.lineage.gpu(hello.job, hello.rank, batch.gpu.name)
            if self.engine.changed:
                self._update(now)
            rank = (hello.job, hello.rank)
            if rank in self._incomplete and (batch.windows or self._undiagnosed(rank)
                                             or (batch.phase_times and self._new_phase_block(rank))):
                # a window after an onset completes the diagnosis; an alert raised before three
                # step blocks after its onset had arrived gets its first one from later batches
                mine = [a for a in self.book.firing(rank) if a.alertname in DIAGNOSED]
                self._diagnose(mine)
                if self.engine.changed:  # an overhead episode found to be the job's own
                    self._update(now)
                if all(a.diagnosis_complete for a in self.book.firing(rank) if a.alertname in DIAGNOSED):
                    self._incomplete.discard(rank)
        except Exception as exc:  # noqa: BLE001 - detection must never break ingest
            self._log(exc)

    def forget(self, keys: Iterable[tuple]) -> None:
        keys = list(keys)
        for job, rank in keys:
            self.engine.forget(job, rank)
        self._forget_own(keys)

    def _forget_own(self, keys: list) -> None:
        for job, rank in keys:
            self._incomplete.discard((job, rank))
            self._phase_blocks.pop((job, rank), None)
            for key in [k for k in self._why_read if k[1:] == (job, rank)]:
                del self._why_read[key]
            self.asks.window_asked.pop((job, rank), None)
        self.evidence.forget(keys)

    def tick(self, now: float, connections: Iterable[tuple]) -> None:
        """Time-based rules, `for` durations, periodic resend of firing alerts.
        ``connections``: ``(job, rank, connected, disconnected_at)`` of every rank held."""
        for _ in self.tick_slices(now, connections):
            pass

    def tick_slices(self, now: float, connections: Iterable[tuple]) -> Iterator[None]:
        """:meth:`tick` as a generator that yields between slices of ``TICK_SLICE`` ranks (the
        event loop acks other agents in between); the alert book is updated once, at the end."""
        try:
            for i, (job, rank, connected, since) in enumerate(connections):
                self.engine.connection(job, rank, connected, since)
                if i % TICK_SLICE == TICK_SLICE - 1:
                    yield
            yield from self.engine.tick_slices(now)
            yield from self.engine.save_slices(now)
            self._update(now, full=True)
            if self.client is not None and now - self._last_resend >= self.client.resend_s:
                self._last_resend = now
                self.client.submit(self.book.firing())
        except Exception as exc:  # noqa: BLE001 - the tick must outlive one bad rank
            self._log(exc)

    # -- internals --------------------------------------------------------------------------
    def _update(self, now: float, full: bool = False) -> None:
        """Hand the engine's conditions to the book: all of them on the tick, else only those
        touched since the last update (a change on one rank costs one rank's work)."""
        touched = self.engine.take_touched()
        if full:
            changes = self.book.update(now, self.engine.conditions())
        else:
            changes = self.book.update_keys(now, touched, self.engine.condition)
        for a in changes:
            if a.state == "firing" and a.alertname == OVERHEAD and len(a.history) == 1:
                self._incomplete.add((a.job, a.rank))  # diagnosed as data comes (no window asked)
            if a.state == "firing" and a.alertname in SLOWDOWNS:
                if len(a.history) == 1 or a.further:  # raised, or a further change's new onset
                    self._incomplete.add((a.job, a.rank))
                    self.asks.slowdown(a, now)
                elif a.key not in self.asks.trace_episodes:
                    self.asks.maybe_trace(a, now)  # an episode that has grown to the trace severity
        stragglers = {a.job for a in changes if a.alertname == STRAGGLER and a.state == "firing"
                      and len(a.history) == 1}
        firing = [a for a in changes if a.state == "firing"]
        if stragglers:  # a straggler named: the job's slowdowns waiting for it say so (diagnosed again)
            seen = {a.key for a in firing}
            for a in self.book.firing():
                if a.job in stragglers and a.alertname in SLOWDOWNS and a.key not in seen:
                    a.diagnosis_complete = False
                    firing.append(a)
        changes = self._diagnose(firing, changes)
        if self.engine.changed:  # an overhead episode found to be the job's own: drift now
            changes = [c for c in changes if c.key not in self.engine.touched]
            self._update(now)
        for a in changes if self._log_changes else ():
            log.warning("stepwatch alert %s %s: %s job=%s rank=%d: %s%s", a.state, a.severity, a.alertname,
                        a.job, a.rank, a.summary, f" [why: {a.diagnosis}]" if a.diagnosis else "")
        if self.client is not None and changes:
            self.client.submit(changes)

    def _new_phase_block(self, rank: tuple) -> bool:
        """The rank's evidence gained a block of phase times since the last look (a slowdown
        raised before 3 blocks after its onset had arrived is diagnosed again from them)."""
        r = self.evidence.rank(*rank)
        n = len(r.phases) if r is not None else 0
        if self._phase_blocks.get(rank) == n:
            return False
        self._phase_blocks[rank] = n
        return True

    def _undiagnosed(self, rank: tuple) -> bool:
        return any(a.alertname in SLOWDOWNS and not a.diagnosis for a in self.book.firing(rank))

    def _diagnose(self, alerts: list[Alert], changes: Optional[list[Alert]] = None) -> list[Alert]:
        """Attach (or complete) the diagnosis of firing slowdown alerts; returns ``changes``
        with the annotated copies in place of the old ones, and sends the updated alerts."""
        changes = list(changes or [])
        updated = []
        for a in alerts:
            if a.alertname not in DIAGNOSED or a.diagnosis_complete:
                continue
            since = a.onset
            if a.alertname == STRAGGLER and a.earlier:
                # the same rank flagged again within the episode: what changed is from its first onset
                since = min(since, unix(a.earlier[0]["onset_at"]))
            reference = (self.engine.drift_reference(a.job, a.rank)
                         if a.alertname in (THROUGHPUT_DRIFT, OVERHEAD) else None)
            lead = (a.evidence or {}).get("kind", "") if a.alertname == THROUGHPUT_DRIFT else ""
            d = diagnose(self.evidence.rank(a.job, a.rank), since, reference, lead)
            if d is None:
                continue
            # Made again as data comes, a diagnosis reads the change over up to 2 minutes from
            # its onset; once the change has gone it reads less and less of it (a live 40-s
            # pulse of GEMMs in an H200 job's backward: "backward +3.6 ms/step" at the raise,
            # "no measured contributor explains the -1.3 ms/step" at the resolve,
            # tests/data/real/diag/h200zn). The why shown stays while a new one reads under half
            # of the largest step change a why of this onset was made on.
            # Nor, in an episode its evidence decided, does a why that names no contributor
            # replace one of the same onset that named one: read later, its "before" can be
            # another level or its "after" hold the steps after the change (a live H200 job's
            # slower loader, held by its wait 0.2 -> 4.6 ms, read "data +2.1 ms/step (data-loader
            # wait +3.3 ms)" for 110 s, then "no measured contributor explains the +6.7 ms/step",
            # tests/data/real/diag/h200zr). (Decided by the step times alone, the later read
            # stands: a window's kernels once read "backward +17.3 ms/step" of a +4.1 ms step.)
            # Nor does a read without the phase times (under 3 blocks of one kind on a side)
            # replace one made from them: a CI run of tests/e2e/test_diagnosis_e2e.py ended with
            # "host CPU +12.7 ms/step ...; phases: no profiler window from before the onset"
            # beside an alert its evidence held by backward's +12.6 ms (which read it came from
            # was not recorded; run alone, the same test's why is "backward +12.5 ms/step").
            onset, peak, shown = self._why_read.get(a.key, (a.onset, 0.0, None))
            if onset != a.onset:
                peak, shown = 0.0, None
            kept = shown is not None and (shown.explained and not d.explained and a.decided == "job"
                                          or shown.phased and not d.phased)
            if a.diagnosis and (d.step_delta_ms < _WHY_KEPT * peak or kept):
                continue
            self._why_read[a.key] = (a.onset, max(peak, d.step_delta_ms), d)
            if a.alertname == OVERHEAD:
                own = _no_window_makes(d)
                if own:
                    self.engine.the_jobs_own(a.job, a.rank, own)
            text = self._text(a, d, since)
            new = self.book.annotate(a.key, diagnosis=text, diagnosis_complete=d.complete)
            if new is not None:
                updated.append(new)
        by_key = {u.key: u for u in updated}
        out = [by_key.pop(c.key, c) if c.state == "firing" else c for c in changes]
        if by_key and self.client is not None:
            self.client.submit(list(by_key.values()))  # a diagnosis completed later
        return out

    def _text(self, a: Alert, d, since: float) -> str:
        """The why of ``a`` from its diagnosis ``d``: a straggler's phases against the other
        ranks' first (and its GPU's extra work before all, a GPU cause); another rank's slowdown
        that waits for a named straggler says so first."""
        text = d.text
        if a.alertname == STRAGGLER:
            versus = against_others(self.evidence.rank(a.job, a.rank),
                                    self.evidence.others(a.job, a.rank), since)
            if versus:
                text = f"{versus}; before -> after: {text}"
            if d.busier:  # its device did more work: a GPU cause, named first
                for item in d.busier:
                    text = text.replace(f"; {item}", "")
                text = f"its GPU did more work: {', '.join(d.busier)}; {text}"
        top = d.contributors[0] if d.contributors else None
        # its top contributor holds 30% or more of the change
        leads = top is not None and top[1] > 0 and top[1] >= 0.3 * d.step_delta_ms
        in_sync = leads and top[0].startswith("sync")
        in_backward = leads and top[0].startswith("backward")
        if a.alertname != STRAGGLER:
            # this rank waited for another: in sync, or (its own device no busier) inside its
            # own backward, where DDP waits for a rank whose GPU does more work or whose own
            # work before the collectives is longer (named by either wait: the others wait in
            # sync and in their backward alike, h200ze_2gpu_m_host_r1)
            slow = sorted(s.rank for s in self.book.firing() if s.alertname == STRAGGLER
                          and s.job == a.job and s.rank != a.rank
                          and (in_sync or (not d.busier and (GPU_BUSIER in s.found or (
                              in_backward and OWN_WORK in s.found)))))
            if slow:
                text = f"waiting for rank {', '.join(map(str, slow[:4]))} (straggler): {text}"
        return text

    def _log(self, exc: Exception) -> None:
        self._once.log(logging.ERROR, (type(exc).__name__, str(exc)[:80]),
                       "stepwatch collector: detection failed (further identical errors not "
                       "logged)", exc_info=True)


def _no_window_makes(d) -> str:
    """What in diagnosis ``d`` no profiler window makes, as a phrase ("" when nothing): the
    allocator's cudaMalloc/cudaFree churn, more tensor work on the device (a profiler adds
    none), or a longer data-loader wait that explains at least half the step's change."""
    if d.churn:
        return d.churn
    tensor = [b for b in d.busier if b.startswith("tensor")]
    if tensor:
        return f"more tensor work on the device ({tensor[0]})"
    for name, delta, detail in d.contributors[:1]:
        waited = name == "data-loader wait" or (name.startswith("data") and "data-loader wait +" in detail)
        if waited and d.step_delta_ms > 0 and delta >= 0.5 * d.step_delta_ms:
            return f"a longer data-loader wait ({name} {delta:+.1f} ms/step)"
    return ""
