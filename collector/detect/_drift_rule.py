"""DriftRule: throughput drift of each rank (:class:`~._drift_pair.RankDrift`) with the evidence
it decides with (:class:`~._evidence.RankEvidence`), its saved state and what it answers about
a rank's arming, reach and settled level.

Fed: phase samples, allocator calls and GPU busy time (evidence); the judged steps, their time
normalised to the rank's first token count; windows' ends; the agent's after-effect events. A
job none of whose ranks has been connected for 10 s has ended: its episodes end on the tick.
"""

from __future__ import annotations

from typing import Iterator, Optional

from ._drift_pair import RankDrift
from ._evidence import RankEvidence
from ._rule import Context, Phases, Rule, Steps
from ._types import SampleTable

__all__ = ["DriftRule", "SAVE_PER_TICK", "SAVE_SLICE"]

_ENDED_AFTER_S = 10.0  # every rank of a job disconnected this long: its drift episodes end
SAVE_SLICE = 25  # drift states saved per slice of a tick (~4 ms on the development machine)
SAVE_PER_TICK = 500  # drift states saved per tick at most (or a tenth of the ranks held, if more)


class _Rank:
    __slots__ = ("evidence", "drift", "ref_tokens")

    def __init__(self, cfg, job: str, rank: int):
        self.evidence = RankEvidence()
        self.drift = RankDrift(cfg.drift, job, rank, self.evidence)
        self.ref_tokens: Optional[int] = None

    def per_token(self, duration_s: list, tokens: Optional[list]) -> list:
        """Step times normalised to the rank's first token count (a step of no count: as it is)."""
        if not tokens:
            return duration_s
        ref = self.ref_tokens
        if ref is None:
            ref = self.ref_tokens = next((t for t in tokens if t), None)
        if ref is None or tokens.count(ref) == len(tokens):  # (all at the reference: as they are)
            return duration_s
        return [d * ref / t if t else d for d, t in zip(duration_s, tokens)]


class DriftRule(Rule):
    """``store``: a :class:`~._persist.DriftStore` or None: a rank's state is restored when it
    is first seen, for the agent session it was saved under only, and saved by :meth:`save`."""

    def __init__(self, cfg, ctx: Context, store=None):
        super().__init__(cfg, ctx)
        self._store = store
        self._ranks: dict[tuple, _Rank] = {}
        self._saved: dict[tuple, int] = {}
        self._on = cfg.enabled and cfg.drift.enabled
        self._evidence = self._on and cfg.drift.evidence

    def added(self, job: str, rank: int) -> None:
        r = self._ranks[(job, rank)] = _Rank(self.cfg, job, rank)
        if self._store is not None:
            state = self._store.load(job, rank)
            # a settled level is restored into the run it was learnt in only: another run
            # under the same name (a restart, a reused name) learns its own
            if state is not None and state.get("session", "") == self.ctx.session(job, rank):
                r.drift.restore(state)
                if r.drift.condition is not None:
                    self.ctx.emit(r.drift, [r.drift.condition])

    def phases(self, job: str, rank: int, p: Phases) -> None:
        if self._evidence and p.end_time_s:
            self._ranks[(job, rank)].evidence.phase_samples(p.end_time_s, p.points, p.device, p.host)

    def steps(self, job: str, rank: int, s: Steps) -> None:
        r = self._ranks[(job, rank)]
        for step, end in s.window_ends:
            r.drift.note_window(step, end)
        kept = s.kept()
        if not (self.cfg.enabled and len(kept)):
            return
        if self._evidence:
            r.evidence.steps(kept.end_time_s, kept.dataloader_wait_s)
        if self._on and (r.drift.feed_many(kept.step, kept.end_time_s, r.per_token(kept.duration_s, kept.tokens))
                         or r.drift.condition):
            self.ctx.emit(r.drift, [r.drift.condition] if r.drift.condition else [])

    def allocator(self, job: str, rank: int, table: SampleTable) -> None:
        if self._evidence:
            self._ranks[(job, rank)].evidence.allocator(
                table["time_s"], [a + f for a, f in zip(table["device_allocs"], table["device_frees"])])

    def gpu(self, job: str, rank: int, table: SampleTable) -> None:
        if self._evidence:
            self._ranks[(job, rank)].evidence.gpu(table["time_s"], table.optional("sm_active_ratio"))

    def events(self, job: str, rank: int, events) -> None:
        for t, kind, message in events:
            r = self._ranks.get((job, rank)) if kind == "window_aftereffect" else None
            if r is not None and r.drift.backed_off(t, message):
                self.ctx.emit(r.drift, [r.drift.condition])

    def tick(self, now: float, per: int) -> Iterator[None]:
        for i, ((job, rank), r) in enumerate(list(self._ranks.items())):
            if i % per == per - 1:
                yield
            # A job none of whose ranks is connected any more has ended (or lost its collector):
            # its slowdown episodes end, so they resolve within a minute instead of firing on
            # until the ranks expire (agent_grace_s).
            if r.drift.condition is not None and self._ranks.get((job, rank)) is r \
                    and self.ctx.ended(job, now, _ENDED_AFTER_S):
                r.drift.end_episode()
                self.ctx.emit(r.drift, [])

    def forget(self, job: str, rank: int, expired: bool) -> None:
        self._saved.pop((job, rank), None)
        r = self._ranks.pop((job, rank), None)
        if r is not None:
            self.ctx.emit(r.drift, [])

    # -- what the engine asks -----------------------------------------------------------------
    def save(self, force: bool = False) -> None:
        """:meth:`save_slices` at once; ``force``: every armed rank's state, changed or not (the
        collector stopping: what changed since the last tick is not lost)."""
        for _ in self.save_slices(SAVE_SLICE, force, share=False):
            pass

    def save_slices(self, per: int, force: bool = False, share: bool = True) -> Iterator[None]:
        """Save the state of each armed rank whose state changed since its last save (armed,
        its noise measured again, an episode raised, risen or cleared: at most about once a
        minute of data per rank), yielding after every ``per`` saves: a state with its evidence
        blocks takes ~0.1 ms and its JSON ~0.06 ms, so 3,000 ranks armed together, saved in one
        go, held the event loop ~0.45 s (bench/results/state_store_2core.md). ``share``: at most
        ``SAVE_PER_TICK`` states or a tenth of the ranks held, the larger (else all); the others
        stay unsaved and the next calls save them: ranks that arm together are saved over a few
        ticks (3,000 over six), all the ranks held within ten (50 s at the default tick)."""
        if self._store is None:
            return
        most = max(SAVE_PER_TICK, len(self._ranks) // 10) if share else None
        done = 0
        for key, r in list(self._ranks.items()):
            if most is not None and done >= most:
                return
            if self._ranks.get(key) is not r or (r.drift.version == self._saved.get(key) and not force):
                continue  # (forgotten or replaced since the slice began, or unchanged)
            state = r.drift.state()
            if state is not None:
                state["session"] = self.ctx.session(*key)
                self._store.save(key[0], key[1], state)
                self._saved[key] = r.drift.version
                done += 1
                if done % per == 0:
                    yield

    def of(self, job: str, rank: int) -> Optional[RankDrift]:
        """The rank's drift detector, or None."""
        r = self._ranks.get((job, rank))
        return r.drift if r is not None else None

    def values(self, job: Optional[str], value) -> dict:
        """``{(job, rank): value(its RankDrift)}`` where that is not None; ``job``: that job's
        ranks only."""
        out = {}
        for key, r in list(self._ranks.items()):
            if job is None or key[0] == job:
                got = value(r.drift)
                if got is not None:
                    out[key] = got
        return out

    def armed(self, job: Optional[str] = None) -> dict[tuple, bool]:
        """``{(job, rank): armed}``: whether the rank's drift detector has its settled level
        (warm-up and settling over; before, nothing is judged); ``job``: that job's ranks only."""
        return self.values(job, lambda d: d.armed)

    def settling_again(self, job: Optional[str] = None) -> dict[tuple, float]:
        """``{(job, rank): onset}`` for the ranks that settle again because a shift found after
        arming began inside their settling time (:attr:`DriftDetector.settling_again_since`)."""
        return self.values(job, lambda d: d.settling_again_since)

    def arming(self, job: Optional[str], live) -> dict[tuple, tuple]:
        """``{(job, rank): (armed_at, last step's end time)}`` for the ranks not armed yet: the
        data time their drift detector arms at (:attr:`DriftDetector.armed_at`) and how far the
        rank's data has got (``live(job, rank)``: its liveness)."""
        out = {}
        for key, at in self.values(job, lambda d: d.armed_at).items():
            r = live(*key)
            if r is not None and r.last_time is not None:
                out[key] = (at, r.last_time)
        return out

    def levels(self, job: Optional[str] = None) -> dict[tuple, float]:
        """``{(job, rank): seconds per step}``: the settled level each armed rank is judged
        against (:meth:`DriftDetector.settled`); ``job``: that job's ranks only."""
        return {key: got[0] for key, got in self.values(job, lambda d: d.settled()).items()}

    def reach(self, job: Optional[str] = None) -> dict[tuple, dict[str, float]]:
        """``{(job, rank): {severity: ratio}}`` for the armed ranks: the smallest sustained
        step-time shift each severity can raise now at the rank's own noise
        (:meth:`DriftDetector.reach`, kept per rank when its spreads are measured). 4.6 ms for
        10,000 armed ranks on the 2-core development machine, as :meth:`armed` (5.3 ms)."""
        return self.values(job, RankDrift.reach)
