"""StragglerRule: one :class:`~._straggler.StragglerDetector` per job, fed each rank's judged
steps, its sampled phase times (the phases apart only), its GPU compute-pipe activity and its
profiler windows."""

from __future__ import annotations

from typing import Optional

from ._rule import SYNC_SEEN, Context, Phases, Rule, Steps
from ._straggler import StragglerDetector
from ._types import SampleTable, WindowPoint

__all__ = ["StragglerRule"]

_PIPES = ("tensor_active_ratio", "fp16_active_ratio", "fp32_active_ratio", "fp64_active_ratio")  # GPM


class StragglerRule(Rule):
    def __init__(self, cfg, ctx: Context):
        super().__init__(cfg, ctx)
        self._jobs: dict[str, StragglerDetector] = {}
        self._first: dict[tuple, int] = {}  # (job, rank) -> the first step number the rank sent
        self._on = cfg.enabled and cfg.straggler.enabled

    def _job(self, job: str) -> StragglerDetector:
        s = self._jobs.get(job)
        if s is None:
            s = self._jobs[job] = StragglerDetector(self.cfg.straggler, job)
        return s

    def _changed(self, s: StragglerDetector, moved: bool) -> None:
        if moved or s.conditions:
            self.ctx.emit(s, s.conditions.values())

    def phases(self, job: str, rank: int, p: Phases) -> None:
        """Samples whose phases were seen apart, per step in seconds: before the collectives
        (data + forward + optimizer), the rank's own time (all but sync), sync. Samples of the
        rank's first ``warmup_steps`` steps are left out, as its step times are: the agent takes
        its first samples on the first steps (to learn what one costs), and where samples are
        sparse a rank's pool reaches back to them (a 2-rank CPU job: rank 1's samples of steps
        3-5 in its pool at step 140 made it slower than rank 0 before anything was injected)."""
        steps, pres, owns, syncs = [], [], [], []
        data, forward, _, sync, optimizer = p.device
        for i, seen in enumerate(p.points):
            if seen & SYNC_SEEN == SYNC_SEEN:
                steps.append(p.step[i])
                syncs.append(sync[i])
                pres.append(data[i] + forward[i] + optimizer[i])
                owns.append(sum(d[i] for d in p.device) - sync[i])
        if not (self._on and steps):
            return
        first = self._first.get((job, rank))
        if first is None:
            first = self._first[(job, rank)] = p.batch_first_step if p.batch_first_step is not None else steps[0]
        warm_end = first + self.cfg.warmup_steps
        if steps[0] < warm_end:
            keep = [i for i, s in enumerate(steps) if s >= warm_end]
            if not keep:
                return
            steps, pres, owns, syncs = ([v[i] for i in keep] for v in (steps, pres, owns, syncs))
        self._job(job).phases(rank, steps, pres, owns, syncs)

    def steps(self, job: str, rank: int, s: Steps) -> None:
        self._first.setdefault((job, rank), s.step[0])
        kept = s.kept()
        if self._on and len(kept):
            d = self._job(job)
            self._changed(d, d.feed_many(rank, kept.step, kept.end_time_s, kept.duration_s, kept.dataloader_wait_s))

    def gpu(self, job: str, rank: int, table: SampleTable) -> None:
        """The GPU's compute-pipe activity (GPM tensor + FP16 + FP32 + FP64, summed; None where a
        sample has no GPM reading: its SM activity unset)."""
        if not self._on:
            return
        seen = table.optional("sm_active_ratio")  # (presence asked of one column: the others read 0 unset)
        if any(v is not None for v in seen):
            values = [None if v is None else sum(vs) for v, *vs in zip(seen, *[table[f] for f in _PIPES])]
            d = self._job(job)
            self._changed(d, d.activity(rank, table["time_s"], values))

    def window(self, job: str, rank: int, w: WindowPoint) -> None:
        """A rank whose compute is slow hides in the collectives, where only the windows see it."""
        if self._on:
            d = self._job(job)
            self._changed(d, d.window(rank, w))

    def forget(self, job: str, rank: int, expired: bool) -> None:
        self._first.pop((job, rank), None)
        d: Optional[StragglerDetector] = self._jobs.get(job)
        if d is not None and d.forget(rank):
            self.ctx.emit(d, d.conditions.values())
