"""LivenessRule: a rank stalled (no step for far longer than its usual step, on the collector's
clock) or its agent gone while the job's other ranks are still connected; judged on the tick
from each rank's :class:`~._liveness.RankLiveness`, which the engine keeps."""

from __future__ import annotations

from typing import Iterator

from ._rule import Context, Rule

__all__ = ["LivenessRule"]


class LivenessRule(Rule):
    def __init__(self, cfg, ctx: Context):
        super().__init__(cfg, ctx)
        self._keys: dict[tuple, None] = {}  # the ranks held, in the order first seen

    def added(self, job: str, rank: int) -> None:
        self._keys[(job, rank)] = None

    def tick(self, now: float, per: int) -> Iterator[None]:
        for i, (job, rank) in enumerate(list(self._keys)):
            if i % per == per - 1:
                yield
            live = self.ctx.live(job, rank)
            if live is None:
                continue
            conds = [c for c in (live.stalled(now), live.gone(now, self.ctx.others_connected(job, rank)))
                     if c is not None]
            self.ctx.emit(("live", job, rank), conds)

    def forget(self, job: str, rank: int, expired: bool) -> None:
        if self._keys.pop((job, rank), 0) is None:
            self.ctx.emit(("live", job, rank), [])
