"""MemoryRule: each rank's allocator and memory rules (:class:`~._memory.MemoryDetector`:
fragmentation, alloc retries, OOMs, GPU and host memory leaks, exhaustion forecasts), fed the
allocator, NVML and host samples; its holds and forecasts judged on the tick."""

from __future__ import annotations

from typing import Iterator

from ._memory import MemoryDetector
from ._rule import Context, Rule, Steps
from ._types import AllocatorPoint, GpuPoint, HostPoint, SampleTable

__all__ = ["MemoryRule", "ALLOCATOR_FIELDS", "GPU_FIELDS"]

# a SampleTable's columns, in the order of the points' fields
ALLOCATOR_FIELDS = ("time_s", "allocated_bytes", "reserved_bytes", "inactive_split_bytes", "alloc_retries", "ooms",
                    "device_total_bytes")
GPU_FIELDS = ("memory_used_bytes", "memory_total_bytes", "clock_event_reasons", "sm_clock_hertz",
              "temperature_celsius")


class MemoryRule(Rule):
    def __init__(self, cfg, ctx: Context):
        super().__init__(cfg, ctx)
        self._ranks: dict[tuple, MemoryDetector] = {}
        self._on = cfg.enabled and cfg.memory.enabled

    def added(self, job: str, rank: int) -> None:
        self._ranks[(job, rank)] = MemoryDetector(self.cfg.memory, job, rank)

    def _emit(self, m: MemoryDetector, moved: bool) -> None:
        if moved or m.conditions:
            self.ctx.emit(m, m.conditions.values())

    def steps(self, job: str, rank: int, s: Steps) -> None:
        self._ranks[(job, rank)].step = s.step[-1]  # (the step a memory condition names)

    def allocator(self, job: str, rank: int, table: SampleTable) -> None:
        """The usual batch makes a point only of the samples the leak trend keeps and of the
        last one, and reads only the columns that decide that: what feeding every sample gives
        (tests/collector/detect/test_batch_path.py)."""
        if not self._on:
            return
        m = self._ranks[(job, rank)]
        due = m.allocators_due(table["time_s"], table["reserved_bytes"], table["inactive_split_bytes"],
                               table["alloc_retries"], table["ooms"])
        if due is None:
            for p in map(AllocatorPoint, *[table[f] for f in ALLOCATOR_FIELDS]):
                self._emit(m, m.allocator(p))
            return
        for i in due:
            self._emit(m, m.allocator(AllocatorPoint(*[table[f][i] for f in ALLOCATOR_FIELDS])))
        m.keep_allocator(AllocatorPoint(*[table.last(f) for f in ALLOCATOR_FIELDS]))
        self._emit(m, False)  # (as after each sample: the same conditions, emitted once)

    def gpu(self, job: str, rank: int, table: SampleTable) -> None:
        """Only the last sample is kept (the near-capacity test reads the device's memory)."""
        self._ranks[(job, rank)].gpu(GpuPoint(table.last("time_s"), *[table.last(f, optional=True)
                                                                      for f in GPU_FIELDS]))

    def host(self, job: str, rank: int, table: SampleTable) -> None:
        """A point only of the samples the leak trend keeps."""
        if not self._on:
            return
        m = self._ranks[(job, rank)]
        due = m.host_due(table["time_s"])
        if due:
            times, resident = table["time_s"], table["resident_memory_bytes"]
            available = table.optional("host_memory_available_bytes")
            for i in due:
                self._emit(m, m.host(HostPoint(times[i], resident[i]), available[i]))
        self._emit(m, False)  # (as after each sample: the same conditions, emitted once)

    def tick(self, now: float, per: int) -> Iterator[None]:
        for i, (key, m) in enumerate(list(self._ranks.items())):
            if i % per == per - 1:
                yield
            if self._ranks.get(key) is m:
                self._emit(m, m.tick(now))

    def forget(self, job: str, rank: int, expired: bool) -> None:
        m = self._ranks.pop((job, rank), None)
        if m is not None:
            self.ctx.emit(m, [])
