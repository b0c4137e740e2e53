"""The collector's HTTP routes: the page, ``/healthz``, ``/api/alerts``, ``/api/jobs``,
``/api/steps``, ``/api/life`` (a job's step time over its life, one summary series), a job's windows and runs, the traces and an uploaded trace file; ``/metrics`` is
the export's (:class:`~..export.Scrape`), handed in. :meth:`Routes.server` builds the
:class:`HttpServer` that serves them.

A whole-fleet ``/api/jobs`` (and its summary) is shared while fresh (:class:`SharedRender`) and
built giving way to a busy ingest between chunks as a scrape does (the default scrape
timeout's span, expecting the CPU its kind took last time): at 10,000 ranks a whole-fleet build
takes 1.5-2 s of CPU on the core ingest needs. Its sleeps count in
stepwatch_collector_scrape_yield_seconds."""

from __future__ import annotations

import json
import os
from typing import Callable, Optional

from ..export import ScrapeYield
from ..state import CollectorHealth, CollectorState
from ._http_server import FileBody, HttpServer
from ._json_routes import SharedRender, jobs_json, jobs_summary_json, runs_json, steps_json
from ._life_route import life_json, life_query
from ._page import page
from ._window_routes import traces_json, windows_json

__all__ = ["Routes"]


def _healthz():
    return 200, "text/plain; charset=utf-8", b"ok\n"


class Routes:
    """``engine``: the detection engine (arming, reach, runs); ``alerts``: the alert list as
    JSON bytes; ``trace_store``: a callable giving the collector's TraceStore or None."""

    def __init__(self, state: CollectorState, health: CollectorHealth, engine, alerts: Callable[[], bytes],
                 trace_store: Callable[[], object]):
        self.state, self.health, self.engine = state, health, engine
        self._alert_json, self._trace_store = alerts, trace_store
        self._shared = SharedRender()
        self._build_cpu_s: dict[str, float] = {}  # CPU of the last whole-fleet build, by kind
        self._http: Optional[HttpServer] = None

    def server(self, metrics, token: str, nice: int) -> HttpServer:
        """The HTTP server of these routes and ``metrics`` (the scrape, a threaded route)."""
        self._http = HttpServer({"/healthz": _healthz, "/api/alerts": self._alerts, "/": page, "/api": self._index},
                                query_routes={"/api/jobs": self._jobs, "/api/steps": self._steps,
                                              "/api/life": self._life},
                                path_routes={"/api/jobs/{job}/windows": self._windows, "/api/traces": self._traces,
                                             "/api/jobs/{job}/runs": self._job_runs,
                                             "/api/traces/{trace_id}": self._trace_file},
                                threaded_routes={"/metrics": metrics}, token=token, nice=nice)
        return self._http

    def _alerts(self):
        return 200, "application/json", self._alert_json()

    def _jobs(self, query):
        """``/api/jobs``: every rank; ``?job=NAME``: one job's ranks with their events;
        ``?summary=1``: one line per job (the page's overview at any fleet size). The whole list
        and the summary are shared while fresh."""
        e = self.engine
        if query.get("summary") not in (None, "", "0"):
            return 200, "application/json", self._shared.get(
                "summary", lambda: self._paced("summary", lambda pause: jobs_summary_json(self.state, pause,
                                                                                         e.lineage.summary)))
        if query.get("job") is None:  # the whole fleet: one answer shared while it is fresh
            return 200, "application/json", self._shared.get("jobs", lambda: self._paced(
                "jobs", lambda pause: jobs_json(self.state, None, e.drift_views(), pause=pause)))
        job = query.get("job")
        return 200, "application/json", jobs_json(self.state, job, e.drift_views(job))

    def _paced(self, kind: str, build):
        """``build(pause)`` giving way to a busy ingest (see the module)."""
        pacing = ScrapeYield(self.health.load, None, expect_s=self._build_cpu_s.get(kind, 0.0))
        try:
            return build(pacing.pause)
        finally:
            self._build_cpu_s[kind] = pacing.done()
            self.health.scrape_yield_s += pacing.slept

    def _index(self):
        """``{"routes": [path, ...]}``: the page fetches only what is listed (a 404 is a console error)."""
        return 200, "application/json", json.dumps({"routes": self._http.paths}).encode()

    def _steps(self, query):
        """``/api/steps?job=NAME``: the job's ranks' step-time trend; ``&ranks=N``: the lowest N
        ranks only (the page asks for the 32 it draws)."""
        if "job" not in query:
            return 400, "text/plain; charset=utf-8", b"missing ?job=\n"
        ranks = query.get("ranks")
        if ranks is not None:
            if not (ranks.isascii() and ranks.isdigit() and 0 < int(ranks) <= 1_000_000):
                return 400, "text/plain; charset=utf-8", b"ranks= must be a whole number from 1 to 1000000\n"
            ranks = int(ranks)
        return 200, "application/json", steps_json(self.state, query["job"], ranks)

    def _life(self, query):
        """``/api/life?job=NAME``: the job's step time over the last hour of its data as one
        summary series (median, lowest and highest rank per bin); ``&since_s=S`` another span
        (``0`` or ``all``: the whole life); ``&rank=R``: that rank's own series
        (:func:`._life_route.life_document`). Built giving way to a busy ingest; the page's
        three ranges of a job's summary are shared while fresh (0.15 s of CPU at 1,000 ranks of
        358 spans on the 2-core development machine: shared for three times that)."""
        if "job" not in query:
            return 400, "text/plain; charset=utf-8", b"missing ?job=\n"
        error, since_s, rank = life_query(query)
        if error:
            return 400, "text/plain; charset=utf-8", (error + "\n").encode()
        def build() -> bytes:
            return self._paced("life", lambda pause: life_json(self.state, query["job"], since_s, rank, pause))

        if rank is None and since_s in (3600.0, 21600.0, None):  # the page's ranges: shared while fresh
            return 200, "application/json", self._shared.get(f"life\0{query['job']}\0{since_s}", build)
        return 200, "application/json", build()

    def _windows(self, params):
        status, body = windows_json(self.state, params["job"])
        return status, "application/json", body

    def _job_runs(self, params):
        """``?ranks=0``: each run as its brief record (no per-rank entries; the page's list)."""
        whole = params.get("query", {}).get("ranks", "1") != "0"
        status, body = runs_json(self.engine.lineage.runs(params["job"], ranks=whole), params["job"])
        return status, "application/json", body

    def _traces(self, _params):
        store = self._trace_store()
        held = store.listing() if store is not None else []
        return 200, "application/json", traces_json(self.state, held)

    def _trace_file(self, params):
        """An uploaded trace as stored: gzip JSON (Perfetto and chrome://tracing open it)."""
        trace_id = params["trace_id"]
        store = self._trace_store()
        path = store.path(trace_id) if store is not None else None
        try:
            if path is None:
                raise FileNotFoundError
            fh = open(path, "rb")  # streamed by the HTTP server, which closes it
            size = os.fstat(fh.fileno()).st_size
        except OSError:
            return 404, "application/json", json.dumps({"error": f"no uploaded trace {trace_id!r}"}).encode()
        return 200, "application/gzip", FileBody(fh, size), (f'Content-Disposition: attachment; filename="{trace_id}.json.gz"',)
