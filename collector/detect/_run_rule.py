"""RunRule: a job's runs and their comparison (:class:`~._lineage.Lineage`): a run starts with a
new agent session on a rank, settles when its ranks' drift detectors have, and is compared once
with the newest settled run of its lineage (StepwatchRunRegression)."""

from __future__ import annotations

from typing import Iterator, Optional

from ._lineage import Lineage
from ._rule import Context, Rule, Steps
from ._run_store import RunStore

__all__ = ["RunRule"]


class RunRule(Rule):
    """``runs``: the records' store (in memory when None); ``lineage`` is read by the API."""

    def __init__(self, cfg, ctx: Context, runs: Optional[RunStore] = None):
        super().__init__(cfg, ctx)
        rc = cfg.runs
        self.lineage = Lineage(runs if runs is not None else RunStore(None, rc.keep), rc.min_ratio, rc.wait_s,
                               rc.enabled and cfg.enabled)

    def _emit(self, job: str) -> None:
        self.ctx.emit(("runs", job), self.lineage.conditions(job))

    def hello(self, job: str, rank: int, ident, now: float) -> None:
        self.lineage.hello(job, rank, ident, now)
        self._emit(job)

    def steps(self, job: str, rank: int, s: Steps) -> None:
        self.lineage.seen(job, rank, s.step[0], s.end_time_s[-1])

    def tick(self, now: float, per: int) -> Iterator[None]:
        for job in self.lineage.tick(now, self.ctx.settled):
            self._emit(job)
        return
        yield  # (a generator: the runs are few)

    def forget(self, job: str, rank: int, expired: bool) -> None:
        if expired and self.lineage.left(job, rank):
            self._emit(job)
