"""DetectionEngine: feeds each batch of each (job, rank) to its list of rules (:mod:`._rule`) and
keeps the set of active conditions. The same object serves live ingest (collector) and replay.

The rules are :data:`RULES`, built from the detection config; adding a rule is one file (a
:class:`~._rule.Rule`), its config section in :mod:`._config` and one line in that list
(docs/ARCHITECTURE.md, "A new rule", works one through). The engine itself keeps what every
rule shares: each rank's liveness (last step, connection), which of a batch's steps are judged
(warm-up, profiled and marked steps left out), the pauses counted, and the agent session a
rank's data comes from.

Contract: one caller at a time (the collector's event loop thread, or the replay loop).
Feeding is O(1) amortised per sample; ``tick(now)`` is O(ranks) and judges time-based rules at
Unix time ``now``. ``conditions()`` lists what holds now; it never raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from ._agent_rule import AgentRule
from ._config import DetectionConfig
from ._drift_rule import SAVE_SLICE, DriftRule
from ._liveness import RankLiveness
from ._liveness_rule import LivenessRule
from ._memory_rule import ALLOCATOR_FIELDS, GPU_FIELDS, MemoryRule
from ._rank_facts import Columns, RankFacts, job_liveness
from ._rule import ConditionSet, Context, Phases, Rule, Steps
from ._run_record import RunIdentity
from ._run_rule import RunRule
from ._run_store import RunStore
from ._straggler_rule import StragglerRule
from ._throttle_rule import ThrottleRule
from ._types import AllocatorPoint, Condition, DriftView, GpuPoint, HostPoint, SampleTable, WindowPoint

if TYPE_CHECKING:
    from ._drift_pair import RankDrift

__all__ = ["DetectionEngine", "RULES", "Columns"]

# The rules every engine holds, in the order each batch is fed to them.
RULES = (DriftRule, StragglerRule, MemoryRule, ThrottleRule, LivenessRule, AgentRule, RunRule)

TICK_SLICE = 1000  # ranks per slice of a tick on the event loop (10,000 ranks: ~3 ms a slice)


class DetectionEngine:
    """Holds every rule and what they emitted (``held``: :class:`ConditionSet`; an alert book
    updates the ``touched`` keys, not every condition of the fleet). ``store``: a _persist.DriftStore (drift state
    saved when it changed, restored when a rank is first seen, for the same agent session
    only); ``runs``: the run records' store (in memory when None)."""

    def __init__(self, cfg: Optional[DetectionConfig] = None, store=None, runs: Optional[RunStore] = None,
                 rules: Sequence[type] = RULES):
        self.cfg = cfg or DetectionConfig()
        self._session: dict[tuple, str] = {}  # (job, rank) -> the agent session its data comes from
        self._ranks: dict[tuple, RankFacts] = {}
        self.held = ConditionSet()  # what every rule emitted, by owner
        self.ctx = Context(self.held.emit, self._live, lambda job, rank: self._session.get((job, rank), ""))
        built = {DriftRule: lambda: DriftRule(self.cfg, self.ctx, store),
                 RunRule: lambda: RunRule(self.cfg, self.ctx, runs)}
        self.rules: list[Rule] = [built[cls]() if cls in built else cls(self.cfg, self.ctx) for cls in rules]
        # per feed, the bound methods of the rules that read it (a rule's default reads nothing)
        self._feeds = {name: [getattr(r, name) for r in self.rules if getattr(type(r), name) is not getattr(Rule, name)]
                       for name in ("phases", "steps", "allocator", "gpu", "host", "events", "window")}
        self.drift: DriftRule = self.rule(DriftRule)
        self.lineage = self.rule(RunRule).lineage
        self._agent: AgentRule = self.rule(AgentRule)
        self.ctx.settled = lambda job, rank: (lambda d: d.settled() if d is not None else None)(
            self.drift.of(job, rank))

    def rule(self, cls: type):
        """The engine's rule of class ``cls`` (KeyError naming it when the engine has none)."""
        for r in self.rules:
            if type(r) is cls:
                return r
        raise KeyError(f"no {cls.__name__} among the engine's rules")

    def _live(self, job: str, rank: int) -> Optional[RankLiveness]:
        r = self._ranks.get((job, rank))
        return r.live if r is not None else None

    def _rank(self, job: str, rank: int) -> RankFacts:
        r = self._ranks.get((job, rank))
        if r is None:
            r = self._ranks[(job, rank)] = RankFacts(self.cfg, job, rank)
            for rule in self.rules:
                rule.added(job, rank)
        return r

    @property
    def touched(self) -> set:
        """The keys of the conditions that came, changed or went since :meth:`take_touched`."""
        return self.held.touched

    @property
    def changed(self) -> bool:
        """Whether the active conditions changed since :meth:`take_touched`."""
        return bool(self.held.touched)

    def take_touched(self) -> set:
        """The keys touched since the last call."""
        return self.held.take_touched()

    def condition(self, key: tuple) -> Optional[Condition]:
        """The active condition of ``key`` (``Condition.key``), or None."""
        return self.held.active.get(key)

    # -- feeding ------------------------------------------------------------------------------
    def feed(self, job: str, rank: int, steps: Optional[Steps] = None, *, profiled: Sequence[int] = (),
             marks: Optional[dict] = None, phases: Optional[Phases] = None,
             allocator: Optional[SampleTable] = None, gpu: Optional[SampleTable] = None,
             host: Optional[SampleTable] = None, events: Sequence[tuple] = (),
             windows: Sequence[WindowPoint] = ()) -> None:
        """One batch of ``rank`` as columns, each part to every rule (None or empty: the batch
        has none): the sampled ``phases`` before the ``steps`` (``profiled``: indices of steps
        the agent's own profiler was on; ``marks``: {index: marked phase name}), then the
        allocator, NVML and host samples, the agent's ``events`` ``(time_s, kind, message)`` and
        the profiler ``windows``. A profiled step counts for liveness and as a pause of kind
        "profiler", never for drift or stragglers. A marked step (evaluation, checkpoint...) is
        left out the same way when the phase delayed it (at least _MARK_DELAY x the median of
        the rank's last 64 steps, marked or not; before 8 are known, always) and its kind marked
        under _ROUTINE_SHARE of those steps; otherwise it is a plain step; a run of steps marked
        with one kind counts as one pause of that kind (at most _MAX_PHASE_KINDS kinds per rank,
        later ones count as "other"). What feeding a batch step by step gives:
        tests/collector/detect/test_batch_path.py."""
        feeds = self._feeds
        if phases is not None or steps or allocator or gpu or host or windows:
            r = self._rank(job, rank)
            if phases is not None:
                for f in feeds["phases"]:
                    f(job, rank, phases)
            if steps:
                r.live.steps(steps.step, steps.end_time_s, steps.duration_s)
                r.judge(steps, profiled, marks, self.cfg.warmup_steps)
                for f in feeds["steps"]:
                    f(job, rank, steps)
            for part, table in (("allocator", allocator), ("gpu", gpu), ("host", host)):
                if table:
                    for f in feeds[part]:
                        f(job, rank, table)
        if events:
            for f in feeds["events"]:
                f(job, rank, events)
        for w in windows:
            for f in feeds["window"]:
                f(job, rank, w)

    def step(self, job: str, rank: int, step: int, time: float, step_time_s: float,
             tokens: Optional[int] = None, wait_s: float = 0.0, profiled: bool = False,
             phase: str = "") -> None:
        """One optimizer step of ``rank``: seconds, Unix end time; ``tokens`` normalises drift
        (:meth:`feed` with one step)."""
        self.feed(job, rank, Steps([step], [time], [step_time_s], [wait_s], [tokens] if tokens is not None else None),
                  profiled=(0,) if profiled else (), marks={0: phase} if phase else None)

    def window(self, job: str, rank: int, w: WindowPoint) -> None:
        """One profiler window of ``rank`` (:meth:`feed` with one window)."""
        self.feed(job, rank, windows=(w,))

    def allocator(self, job: str, rank: int, p: AllocatorPoint) -> None:
        """One allocator sample (:meth:`feed` with one)."""
        self.feed(job, rank, allocator=Columns(**{f: [getattr(p, f if f != "time_s" else "time")]
                                                  for f in ALLOCATOR_FIELDS}))

    def gpu(self, job: str, rank: int, p: GpuPoint) -> None:
        """One NVML sample (:meth:`feed` with one)."""
        self.feed(job, rank, gpu=Columns(time_s=[p.time], **{f: [getattr(p, f)] for f in GPU_FIELDS}))

    def host(self, job: str, rank: int, p: HostPoint, available_bytes: Optional[int] = None) -> None:
        """One host sample (:meth:`feed` with one)."""
        self.feed(job, rank, host=Columns(time_s=[p.time], resident_memory_bytes=[p.resident_memory_bytes],
                                          host_memory_available_bytes=[available_bytes]))

    def received(self, job: str, rank: int, now: float) -> None:
        """A batch with steps of ``rank`` arrived at the collector's time ``now`` (the stall
        rule's clock: an agent host's clock that steps back or ahead raises no stall)."""
        r = self._ranks.get((job, rank))
        if r is not None:
            r.live.last_received = now

    def connection(self, job: str, rank: int, connected: bool, disconnected_at: Optional[float]) -> None:
        """Live only: whether a rank has an open agent stream, and since when it has none."""
        live = self._rank(job, rank).live
        live.connected = connected
        live.disconnected_at = None if connected else disconnected_at

    def connected(self, job: str, rank: int, ident: RunIdentity, live: int, now: float) -> bool:
        """An agent session connected as ``rank`` of ``job`` (``live``: the rank's live sessions,
        this one included). A session other than the one the rank's data came from, alone on the
        rank, is a new run (:class:`_lineage.Lineage`): the rank's detection state from the run
        before is dropped, so the new run learns its own level. Two live sessions on one rank are
        a misconfigured job (:meth:`sessions`), never a new run. True when the rank's state was
        dropped."""
        key = (job, rank)
        old = self._session.get(key)
        if live > 1 or old == ident.session:
            return False
        self._session[key] = ident.session
        for rule in self.rules:
            rule.hello(job, rank, ident, now)
        dropped = old is not None and old != ident.session and key in self._ranks
        if dropped:
            self._drop(job, rank, expired=False)
        return dropped

    def sessions(self, job: str, rank: int, live: dict, now: float) -> None:
        """The agent sessions connected as ``rank`` of ``job`` (``{session_id: "host pid N"}``):
        more than one raises StepwatchDuplicateRank (:meth:`AgentRule.sessions`)."""
        self._agent.sessions(job, rank, live, now)

    def forget(self, job: str, rank: int) -> None:
        """Drop a rank (expired in the collector); its conditions end, and its run once all the
        run's ranks have gone."""
        self._session.pop((job, rank), None)
        self._drop(job, rank, expired=True)

    def _drop(self, job: str, rank: int, expired: bool) -> None:
        self._ranks.pop((job, rank), None)
        for rule in self.rules:
            rule.forget(job, rank, expired)

    # -- time ---------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Judge stalls, agent-gone and expiring holds at Unix time ``now`` (O(ranks))."""
        for _ in self.tick_slices(now):
            pass

    def tick_slices(self, now: float, per: int = TICK_SLICE) -> Iterator[None]:
        """:meth:`tick` in slices of ``per`` ranks: a generator that yields between slices, so
        the event loop can take other work (acks) in between (10,000 ranks: 30 ms of this tick
        on the development machine's core). Each rule judges the ranks it holds when its turn
        starts; one forgotten or replaced before its slice is skipped, and ingest may have fed a
        rank in between (judged as it is then)."""
        if not self.cfg.enabled:
            return
        self.ctx.connected, self.ctx.last_gone = yield from job_liveness(list(self._ranks.items()), per)
        for rule in self.rules:
            yield from rule.tick(now, per)

    def save(self, now: float, force: bool = False) -> None:
        """Save the drift state of each armed rank whose state changed since its last save
        (``force``: of every armed rank), all of them at once."""
        self.drift.save(force)

    def save_slices(self, now: float, per: int = SAVE_SLICE) -> Iterator[None]:
        """:meth:`save` as a generator that yields after every ``per`` states saved (the event
        loop acks other agents in between), of at most ``SAVE_PER_TICK`` states: the rest are
        saved by the next calls (the housekeeping tick's, every ``eval_interval_s``)."""
        yield from self.drift.save_slices(per)

    # -- what the API, the alert book and the metrics read ------------------------------------
    def drift_of(self, job: str, rank: int) -> Optional["RankDrift"]:
        """The rank's drift detector, or None."""
        return self.drift.of(job, rank)

    def drift_reference(self, job: str, rank: int) -> Optional[tuple[float, float]]:
        """:meth:`DriftDetector.reference_span` of the rank's drift detector (None without one)."""
        d = self.drift.of(job, rank)
        return d.reference_span() if d is not None else None

    def the_jobs_own(self, job: str, rank: int, evidence: str) -> None:
        """The rank's open drift episode, raised as the profiler's after-effect, is the job's
        own (:meth:`DriftDetector.the_jobs_own`)."""
        d = self.drift.of(job, rank)
        if d is not None and d.the_jobs_own(evidence):
            self.held.emit(d, [d.condition])

    def armed(self, job: Optional[str] = None) -> dict[tuple, bool]:
        """:meth:`DriftRule.armed` (``job``: that job's ranks only; so the three below)."""
        return self.drift.armed(job)

    def settling_again(self, job: Optional[str] = None) -> dict[tuple, float]:
        """:meth:`DriftRule.settling_again`."""
        return self.drift.settling_again(job)

    def arming(self, job: Optional[str] = None) -> dict[tuple, tuple]:
        """:meth:`DriftRule.arming`, with how far each rank's data has got."""
        return self.drift.arming(job, self._live)

    def reach(self, job: Optional[str] = None) -> dict[tuple, dict[str, float]]:
        """:meth:`DriftRule.reach`."""
        return self.drift.reach(job)

    def drift_views(self, job: Optional[str] = None) -> dict[tuple, DriftView]:
        """``{(job, rank): DriftView}`` for every rank the drift rule knows (``job``: that
        job's ranks only): the five readings above in one typed value per rank."""
        armed, reach, levels = self.armed(job), self.reach(job), self.drift.levels(job)
        again, arming = self.settling_again(job), self.arming(job)
        return {key: DriftView(armed=value, reach=reach.get(key), level_s=levels.get(key),
                               settling_again_since=again.get(key), arming=arming.get(key))
                for key, value in armed.items()}

    def pauses(self) -> dict[tuple, dict[str, int]]:
        """``{(job, rank): {kind: count}}``: pause episodes the drift detector left out
        ("stall": one step, "pause": several), steps the agent profiled ("profiler") and
        marked phases (their kind: "eval", "checkpoint", ...)."""
        drift = self.drift.values(None, lambda d: d.pauses)
        kinds = {key: r.pauses(drift.get(key, {})) for key, r in list(self._ranks.items())}
        return {key: k for key, k in kinds.items() if k}

    def conditions(self) -> list[Condition]:
        return list(self.held.active.values())

    def rank_keys(self) -> set:
        return set(self._ranks)

    def last_step(self, job: str, rank: int) -> Optional[int]:
        r = self._ranks.get((job, rank))
        return r.live.last_step if r is not None else None
