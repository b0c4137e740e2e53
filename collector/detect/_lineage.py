"""Runs of one job, compared with each other: a resumed job that came back slower is raised.

A **run** is the agents' sessions of one start of a job: a Hello whose rank the job's current
run already holds under another session (the job restarted: preemption, a resume from a
checkpoint), or whose world size differs, begins a new run; the other ranks' first Hellos join
it. A reconnect (the same session, a collector restart in between included) stays in its run.
After a collector restart, a rank with no entry in the stored run (it joined less than a tick
before the restart) resumes that run; when the next rank back shows that the job restarted
meanwhile (a rank of the record under a new session), it moves into the new run with it, unless
a rank of the record came back under its own session first (the run went on).
The **lineage** of a job is its runs of the same job name, world size, tokens per step and
samples per step (the agent's ``tokens_per_step`` / ``samples_per_step``): a job name reused by
another model or batch size starts a lineage of its own and is never compared across.

When every rank of a run has settled (the drift detector's settled level, 3 minutes after its
first step at the defaults; or ``runs.wait_s`` after the first rank settled, with the ranks
settled by then), its level (seconds per step, the median of the ranks') is compared once with
the newest settled run of its lineage. Slower by at least ``runs.min_ratio`` and by more than
both runs' noise (the sum of their spreads of 90 s medians) raises :data:`RUN_REGRESSION` for
the run, with what differs between the two (hosts, GPU model, driver, torch, CUDA, agent
version and settings, the step it started from); a rank much slower than the job's other ranks
is named. A faster or equal run is recorded, never raised. The condition lasts while the run
does.

Records (detect/_run_store.py): one SQLite table next to the drift state (``state_dir``), the
newest ``runs.keep`` runs per job; in memory only without a ``state_dir``. Written when a run
starts, at the next tick after ranks joined it, when it settles, once a minute of data while it
runs, and when it ends. A store that fails
(damaged, read-only, full) logs once; detection and the in-memory lineage go on.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Callable, Optional

from ._names import RUN_REGRESSION
from ._run_record import RankRun, Run, RunComparison, RunIdentity, brief, changes, first_step
from ._run_store import RunStore
from ._types import WARNING, Condition, median

__all__ = ["Lineage"]

_SAVE_EVERY_S = 60.0   # a live run's record is written at most this often (its end time moves)
_RANK_APART = 0.05     # a rank this much slower than the median rank's change is named


class Lineage:
    """The runs of every job. ``hello`` per agent connect (True: the rank's session begins a new
    run, so the rank's detection state from the run before is not its own), ``seen`` per batch
    of steps, ``tick(now, level)`` per collector tick (``level(job, rank)`` -> (settled seconds
    per step, log spread) once the rank's drift detector has settled, else None) returns the jobs
    whose conditions changed; ``conditions(job)`` the job's :data:`RUN_REGRESSION` or none."""

    def __init__(self, store: Optional[RunStore] = None, min_ratio: float = 0.05, wait_s: float = 300.0,
                 enabled: bool = True):
        self.store = store if store is not None else RunStore(None)
        self.min_ratio, self.wait_s, self.enabled = min_ratio, wait_s, enabled
        self._current: dict[str, Run] = {}
        self._conditions: dict[str, Condition] = {}
        # the HTTP worker thread and a scrape read runs while the event loop changes them
        self._lock = threading.RLock()

    # -- runs -----------------------------------------------------------------------------------
    def hello(self, job: str, rank: int, ident: RunIdentity, now: float) -> bool:
        with self._lock:
            return self._hello_locked(job, rank, ident, now)

    def gpu(self, job: str, rank: int, name: str) -> None:
        """The rank's GPU model, learnt after its Hello (the agent sends it in a batch)."""
        with self._lock:
            run = self._current.get(job)
            r = run.ranks.get(rank) if run is not None else None
            if r is not None and name and r.ident.gpu != name:
                r.ident = dataclasses.replace(r.ident, gpu=name)

    def left(self, job: str, rank: int) -> bool:
        """``rank`` expired from the collector; the run ends once all its ranks have. True when
        the job's condition changed."""
        with self._lock:
            return self._left_locked(job, rank)

    def tick(self, now: float, level: Callable[[str, int], Optional[tuple]]) -> set:
        """Judge each live run that has not been compared yet; save live runs' records now and
        then. Returns the jobs whose condition changed."""
        with self._lock:
            return self._tick_locked(now, level)

    def _hello_locked(self, job: str, rank: int, ident: RunIdentity, now: float) -> bool:
        run = self._current.get(job) or self._resumed(job, rank, ident)
        if run is not None and not run.ended:
            held = run.ranks.get(rank)
            if held is not None and held.ident.session == ident.session:
                held.gone = False
                # (a rank of the stored record back under its session: the run went on through
                # the restart, and the ranks that joined it since are its own)
                run.joined_since_resume = None
                return False  # a reconnect (a collector restart in between included)
            if held is None and run.world == ident.world and ident.session not in run.sessions:
                run.ranks[rank] = RankRun(ident)
                run.sessions.add(ident.session)
                if run.joined_since_resume is not None:
                    run.joined_since_resume.add(rank)
                # written at the next tick, one record for every rank that joined since: a record
                # is O(ranks), and made at each rank's Hello a 3,000-rank job's start cost the
                # event loop 22.6 s (bench/results/run_record_start_2core.md)
                run.saved_at = -math.inf
                return False
        moved = []
        if run is not None:
            moved = self._first_back(run, rank, ident)
            self._end(run, now)
        run = Run(job=job, run_id=ident.session or f"{job}-{now:.0f}", world=ident.world, tokens=ident.tokens,
                   samples=ident.samples, started_at=ident.attach_time_s or now, last_time=now)
        run.ranks[rank] = RankRun(ident)
        run.sessions.add(ident.session)
        for r, rr in moved:
            run.ranks[r] = rr
            run.sessions.add(rr.ident.session)
            if rr.ident.attach_time_s:
                run.started_at = min(run.started_at, rr.ident.attach_time_s)
        self._current[job] = run
        self._save(run, now, force=True)
        return True

    @staticmethod
    def _first_back(run: Run, rank: int, ident: RunIdentity) -> list:
        """The ranks to take out of ``run``, which ``rank``'s Hello (``ident``) ends as a restart
        of the job, into the run it begins: those that joined ``run`` after it was resumed from
        its stored record under a session that record lacked, of ``ident``'s world size. The
        first rank back after a collector restart that lacks an entry of its own is resumed into
        the stored run (it may have joined less than a tick before the restart); when the next
        rank back shows that the job restarted meanwhile, that first rank was the new run's.
        Returns [(rank, RankRun)], taken out of ``run``."""
        if not run.joined_since_resume:  # (none, not resumed, or its stored ranks came back)
            return []
        out = []
        for r in sorted(run.joined_since_resume):
            rr = run.ranks.get(r)
            if r == rank or rr is None or rr.ident.world != ident.world:
                continue
            out.append((r, run.ranks.pop(r)))
            run.sessions.discard(rr.ident.session)
        run.joined_since_resume.clear()
        return out

    def _resumed(self, job: str, rank: int, ident: RunIdentity) -> Optional[Run]:
        """After a collector restart: the job's newest stored run, not ended before the restart,
        goes on when it holds this session, or holds no entry for this rank and has this world
        size (a rank that joined less than a tick before the restart: ranks that join are written
        at the next tick); one that holds this rank under another session, or another world
        size, ends here (a new run of the job)."""
        stored = self.store.runs(job, ranks=False)  # (an ended run's, not needed, is not decompressed)
        if not stored or stored[-1].get("ended_at") is not None:
            return None
        try:
            run = Run.from_record(stored[-1])
        except (KeyError, TypeError, ValueError):
            return None
        held = run.ranks.get(rank)
        if held is not None:
            another = held.ident.session != ident.session
        else:  # (written at the next tick after it joined: a restart came first)
            another = run.world != ident.world
        if another:
            run.ended = True
            self.store.save(run.record())
            return None
        self._current[job] = run
        run.joined_since_resume = set()
        if run.regression and run.compared is not None:
            self._conditions[job] = self._condition(run, run.compared, run.last_time)
        return run

    def seen(self, job: str, rank: int, first_step: int, last_time: float) -> None:
        """A batch of ``rank``'s steps: the first step number of the batch, its last end time."""
        run = self._current.get(job)
        if run is None:
            return
        r = run.ranks.get(rank)
        if r is not None and r.first_step is None:
            r.first_step = first_step
        run.last_time = max(run.last_time, last_time)

    def _left_locked(self, job: str, rank: int) -> bool:
        run = self._current.get(job)
        if run is None or rank not in run.ranks:
            return False
        run.ranks[rank].gone = True
        if all(r.gone for r in run.ranks.values()):
            self._end(run, run.last_time)
            return self._conditions.pop(job, None) is not None
        return False

    def _end(self, run: Run, now: float) -> None:
        run.ended = True
        self._save(run, now, force=True)
        if self._current.get(run.job) is run:
            del self._current[run.job]
        self._conditions.pop(run.job, None)

    def _save(self, run: Run, now: float, force: bool = False) -> None:
        if force or now - run.saved_at >= _SAVE_EVERY_S:
            run.saved_at = now
            self.store.save(run.record())

    # -- settling and the comparison ---------------------------------------------------------------
    def _tick_locked(self, now: float, level: Callable[[str, int], Optional[tuple]]) -> set:
        changed = set()
        for job, run in list(self._current.items()):
            if run.settled_s is None and self.enabled:
                if self._settle(run, now, level):
                    changed.add(job)
            elif run.settled_s is not None and now - run.saved_at >= _SAVE_EVERY_S:
                self._refresh(run, level)
            self._save(run, now)
        return changed

    @staticmethod
    def _refresh(run: Run, level) -> None:
        """The ranks' spreads measured again over the run's quiet history (at settling they are
        measured on its first two minutes only): what a later run is compared against."""
        for rank, r in run.ranks.items():
            got = level(run.job, rank) if r.settled_s is not None else None
            if got is not None:
                r.noise = got[1]
        noises = [r.noise for r in run.ranks.values() if r.noise is not None]
        run.noise = max(noises) if noises else run.noise

    def _settle(self, run: Run, now: float, level) -> bool:
        for rank, r in run.ranks.items():
            if r.settled_s is None:
                got = level(run.job, rank)
                if got is not None:
                    r.settled_s, r.noise = got
                    run.first_settled = run.first_settled or now
        settled = {k: r for k, r in run.ranks.items() if r.settled_s is not None}
        if not settled:
            return False
        if len(settled) < run.world and now - run.first_settled < self.wait_s:
            return False
        run.settled_s = median([r.settled_s for r in settled.values()])
        run.noise = max(r.noise or 0.0 for r in settled.values())
        before = self._previous(run)
        if before is not None:
            run.compared = self._compare(run, before)
            run.regression = (run.compared.ratio - 1 >= self.min_ratio
                              and math.log(run.compared.ratio) > run.compared.noise)
        self._save(run, now, force=True)
        if run.regression:
            self._conditions[run.job] = self._condition(run, run.compared, now)
            return True
        return False

    def _previous(self, run: Run) -> Optional[Run]:
        """The newest settled run of the same lineage, started before this one."""
        for rec in reversed(self.store.runs(run.job, ranks=False)):
            if rec.get("run") == run.run_id or float(rec.get("started_at", 0)) > run.started_at:
                continue
            if (rec.get("world_size") != run.world or rec.get("tokens_per_step") != run.tokens
                    or rec.get("samples_per_step") != run.samples):
                return None  # the name was reused by another model: a new lineage starts here
            if rec.get("settled_step_s"):
                try:
                    return Run.from_record(rec if "ranks" in rec else self.store.one(run.job, rec["run"]))
                except (KeyError, TypeError, ValueError):
                    return None
        return None

    def _compare(self, run: Run, before: Run) -> RunComparison:
        ratio = run.settled_s / before.settled_s
        worst = None
        per = {k: r.settled_s / before.ranks[k].settled_s for k, r in run.ranks.items()
               if r.settled_s and k in before.ranks and before.ranks[k].settled_s}
        if len(per) >= 2:
            mid = median(list(per.values()))
            k = max(per, key=per.get)
            if per[k] / mid - 1 >= _RANK_APART and math.log(per[k] / mid) > (run.ranks[k].noise or 0) + (
                    before.ranks[k].noise or 0):
                worst = k
        return RunComparison(
            against=before.run_id, against_started=before.started_at, before_s=before.settled_s,
            after_s=run.settled_s, ratio=ratio, noise=(run.noise or 0.0) + (before.noise or 0.0),
            changed=tuple(changes(before, run)), rank=worst,
            rank_ratio=per[worst] if worst is not None else None,
            rank_host=run.ranks[worst].ident.host if worst is not None else "")

    def _condition(self, run: Run, comp: RunComparison, now: float) -> Condition:
        return Condition(RUN_REGRESSION, run.job, -1, WARNING, comp.text(), now, ratio=comp.ratio,
                         evidence=comp, decided="runs")

    # -- reading ------------------------------------------------------------------------------------
    def conditions(self, job: str) -> list:
        c = self._conditions.get(job)
        return [c] if c is not None else []

    def runs(self, job: str, ranks: bool = True) -> list[dict]:
        """The job's runs, oldest first, the live one as it stands now (any thread); ``ranks``
        False: each as its :func:`~._run_record.brief` record (no per-rank entries: a page's
        list of a 1,000-rank job's runs). The stored ones are read outside the lineage's lock (a
        Hello on the event loop waits for it): an ended run of 10,000 ranks takes 0.17 s to
        decompress; the live one's record is built under it (0.02 s at 10,000 ranks; this 2-core
        machine)."""
        with self._lock:
            run = self._current.get(job)
            live = dict(run.record(), live=True) if run is not None else None
        out = self.store.runs(job, ranks=ranks)
        if live is not None:
            out = [r for r in out if r.get("run") != live["run"]] + [live]
        return out if ranks else [brief(r) for r in out]

    def summary(self, job: str) -> Optional[dict]:
        """The live run in one line (``/api/jobs?summary=1``, the page, ``stepwatch top``):
        ``{"run", "started_at", "first_step", "settled_step_s", "previous_step_s", "previous_started_at",
        "ratio", "regression"}``, or None when the collector holds no live run of ``job``."""
        with self._lock:
            run = self._current.get(job)
            if run is None:
                return None
            c = run.compared
            return {"run": run.run_id, "started_at": run.started_at,
                    "first_step": first_step(r.first_step for r in run.ranks.values()),
                    "settled_step_s": run.settled_s, "previous_step_s": c.before_s if c else None,
                    "previous_started_at": c.against_started if c else None,
                    "ratio": c.ratio if c else None, "regression": run.regression}

    def ratios(self) -> dict:
        """``{job: ratio}``: each live run's settled level over its previous run's, once compared."""
        with self._lock:
            return {job: run.compared.ratio for job, run in self._current.items() if run.compared is not None}
