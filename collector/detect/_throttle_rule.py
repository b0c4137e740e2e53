"""ThrottleRule: a rank's GPU clocks throttled (NVML clock-event reasons in ``gpu.throttle_mask``),
held while its samples show it."""

from __future__ import annotations

from typing import Optional

from ._liveness import throttle_condition
from ._memory_rule import GPU_FIELDS
from ._rule import Context, Rule
from ._types import Condition, GpuPoint, SampleTable

__all__ = ["ThrottleRule"]


class ThrottleRule(Rule):
    def __init__(self, cfg, ctx: Context):
        super().__init__(cfg, ctx)
        self._held: dict[tuple, Condition] = {}
        self._on = cfg.enabled and cfg.gpu.enabled

    def gpu(self, job: str, rank: int, table: SampleTable) -> None:
        """Judged sample by sample while throttling is held or seen in the batch (else nothing
        is read but the reasons' column)."""
        key = (job, rank)
        mask = self.cfg.gpu.throttle_mask
        if not self._on or (key not in self._held and not any([x & mask for x in table["clock_event_reasons"] if x])):
            return
        live = self.ctx.live(job, rank)
        for p in map(GpuPoint, table["time_s"], *[table.optional(f) for f in GPU_FIELDS]):
            old = self._held.get(key)
            new: Optional[Condition] = throttle_condition(self.cfg.gpu, job, rank, p, old,
                                                          live.last_step if live is not None else None)
            if new is not None:
                self._held[key] = new
            else:
                self._held.pop(key, None)
            if new is not None or old is not None:  # (neither: nothing held to emit)
                self.ctx.emit(("throttle", job, rank), [new] if new else [])

    def forget(self, job: str, rank: int, expired: bool) -> None:
        if self._held.pop((job, rank), None) is not None:
            self.ctx.emit(("throttle", job, rank), [])
