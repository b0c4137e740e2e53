"""DetectionEngine: routes samples to the detectors of each (job, rank) and keeps the set of
active conditions. The same object serves live ingest (collector) and replay.

Contract: one caller at a time (the collector's event loop thread, or the replay loop).
Feeding is O(1) amortised per sample; ``tick(now)`` is O(ranks) and judges time-based rules at
Unix time ``now``. ``conditions()`` lists what holds now; it never raises.
"""

from __future__ import annotations

import collections
import re
from typing import Iterable, Iterator, Optional, Sequence

from ._config import DetectionConfig
from ._drift_pair import RankDrift
from ._evidence import RankEvidence
from ._lineage import Lineage
from ._run_record import RunIdentity
from ._run_store import RunStore
from ._liveness import RankLiveness, throttle_condition
from ._memory import MemoryDetector
from ._straggler import StragglerDetector
from ._names import AGENT_RESTART_CAP, DUPLICATE_RANK
from ._types import WARNING, AllocatorPoint, Condition, GpuPoint, HostPoint, SampleTable, WindowPoint, median

__all__ = ["DetectionEngine"]

_MAX_PHASE_KINDS = 8  # marked phase kinds per rank (a label each); more count as "other"
# A marked step is left out of drift and stragglers only when the phase delayed it: at least
# this many times the median of the rank's last 64 steps. Marks never hide a slowdown: a Hugging
# Face job logging every step marks every step "log", and a +70% slowdown went unreported when
# every marked step was left out.
_MARK_DELAY = 1.2
_RESTART = re.compile(r"restart (\d+) of (\d+)")  # the agent's sidecar_restarted event message
_ENDED_AFTER_S = 10.0  # every rank of a job disconnected this long: its drift episodes end
TICK_SLICE = 1000  # ranks per slice of a tick on the event loop (10,000 ranks: ~3 ms a slice)
# a SampleTable's columns, in the order of the points' fields
_ALLOCATOR_FIELDS = ("time_s", "allocated_bytes", "reserved_bytes", "inactive_split_bytes", "alloc_retries", "ooms",
                     "device_total_bytes")
_GPU_FIELDS = ("memory_used_bytes", "memory_total_bytes", "clock_event_reasons", "sm_clock_hertz",
               "temperature_celsius")
_PIPES = ("tensor_active_ratio", "fp16_active_ratio", "fp32_active_ratio", "fp64_active_ratio")  # GPM


class _Rank:
    def __init__(self, cfg: DetectionConfig, job: str, rank: int):
        self.seen = 0
        self.first_step: Optional[int] = None  # the first step number this rank sent
        self.profiled = 0
        self.marked: dict[str, int] = {}  # phase kind -> marked pause episodes
        self.last_phase = ""
        self.ref_tokens: Optional[int] = None
        self.recent: collections.deque = collections.deque(maxlen=64)  # durations (marked or not)
        self.evidence = RankEvidence()
        self.drift = RankDrift(cfg.drift, job, rank, self.evidence)
        self.memory = MemoryDetector(cfg.memory, job, rank)
        self.live = RankLiveness(cfg.liveness, job, rank)
        self.throttle: Optional[Condition] = None

    def kept(self, step: list, end_time_s: list, duration_s: list, profiled: Sequence[int],
             phases: Optional[dict], warmup_steps: int) -> Optional[list]:
        """Which of a batch's steps the drift and straggler rules see: None for all of them (the
        usual batch), else their indices. Left out: the rank's first ``warmup_steps``, profiled
        steps (a window's last one noted as the window's end) and marked steps their phase
        delayed. Every step counts in the rank's recent ones and its marks."""
        n = len(step)
        warm = max(0, warmup_steps - self.seen)  # rows before this index are warm-up
        if self.first_step is None:
            self.first_step = step[0]
        self.seen += n
        if not profiled and not phases and not self.last_phase:
            self.recent.extend(duration_s[-64:])
            return None if warm == 0 else list(range(warm, n))
        keep = []
        skip = set(profiled)
        for i in sorted(skip):  # a run's last profiled step: a window's end
            if i + 1 not in skip and i < n:
                self.drift.note_window(step[i], end_time_s[i])
        recent = self.recent
        for i in range(n):
            phase = self.mark(phases.get(i, "") if phases else "")
            if i in skip:
                self.profiled += 1
                continue
            # a marked step the phase did not delay (against the rank's recent steps, marked
            # or not) is a plain step
            if i >= warm and (not phase or (len(recent) >= 8 and duration_s[i] < _MARK_DELAY * median(recent))):
                keep.append(i)
            recent.append(duration_s[i])
        return keep

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

    def mark(self, phase: str) -> str:
        """A step's marked phase ("" for none): a run of one kind counts once in ``marked``;
        past _MAX_PHASE_KINDS kinds it is "other". Returns the phase as counted."""
        if phase != self.last_phase:
            if phase:
                if phase not in self.marked and len(self.marked) >= _MAX_PHASE_KINDS:
                    phase = "other"
                self.marked[phase] = self.marked.get(phase, 0) + 1
            self.last_phase = phase
        return phase


class DetectionEngine:
    """Holds every detector. ``touched`` holds the keys of the conditions that came, changed or
    went since :meth:`take_touched` (an alert book updates those, not every condition of the
    fleet); ``changed``: whether there are any."""

    def __init__(self, cfg: Optional[DetectionConfig] = None, store=None, runs: Optional[RunStore] = None):
        self.cfg = cfg or DetectionConfig()
        # (a _persist.DriftStore: drift state saved when it changed, restored when a rank is
        # first seen, for the same agent session only)
        self._store = store
        self._session: dict[tuple, str] = {}  # (job, rank) -> the agent session its data comes from
        rc = self.cfg.runs
        # the runs of each job and their comparison (runs: their records, in memory when None)
        self.lineage = Lineage(runs if runs is not None else RunStore(None, rc.keep), rc.min_ratio, rc.wait_s,
                               rc.enabled and self.cfg.enabled)
        self._saved: dict[tuple, int] = {}
        self._ranks: dict[tuple, _Rank] = {}
        self._stragglers: dict[str, StragglerDetector] = {}
        self._active: dict[tuple, Condition] = {}
        self._owned: dict[object, set] = {}
        self.touched: set = set()

    def _rank(self, job: str, rank: int) -> _Rank:
        r = self._ranks.get((job, rank))
        if r is None:
            r = self._ranks[(job, rank)] = _Rank(self.cfg, job, rank)
            if self._store is not None:
                state = self._store.load(job, rank)
                # a settled level is restored into the run it was learnt in only: another run
                # under the same name (a restart, a reused name) learns its own
                if state is not None and state.get("session", "") == self._session.get((job, rank), ""):
                    r.drift.restore(state)
                    if r.drift.condition is not None:
                        self._sync(r.drift, [r.drift.condition])
        return r

    def save(self, now: float) -> None:
        """Save the drift state of each armed rank whose state changed since its last save
        (armed, its noise measured again, an episode raised, risen or cleared: at most about
        once a minute of data per rank)."""
        if self._store is None:
            return
        for key, r in list(self._ranks.items()):
            if r.drift.version != self._saved.get(key):
                state = r.drift.state()
                if state is not None:
                    state["session"] = self._session.get(key, "")
                    self._store.save(key[0], key[1], state)
                    self._saved[key] = r.drift.version

    def _sync(self, owner: object, conds: Iterable[Condition]) -> None:
        if not conds and not self._owned.get(owner):  # the usual tick of a quiet rank
            return
        new = {c.key: c for c in conds}
        for key in self._owned.get(owner, set()) - new.keys():
            self._active.pop(key, None)
            self.touched.add(key)
        for key, c in new.items():
            if self._active.get(key) != c:
                self._active[key] = c
                self.touched.add(key)
        self._owned[owner] = set(new)

    @property
    def changed(self) -> bool:
        """Whether the active conditions changed since :meth:`take_touched`."""
        return bool(self.touched)

    def take_touched(self) -> set:
        """The keys touched since the last call."""
        touched, self.touched = self.touched, set()
        return touched

    def condition(self, key: tuple) -> Optional[Condition]:
        """The active condition of ``key`` (``Condition.key``), or None."""
        return self._active.get(key)

    def step(self, job: str, rank: int, step: int, time: float, step_time_s: float,
             tokens: Optional[int] = None, wait_s: float = 0.0, profiled: bool = False,
             phase: str = "") -> None:
        """One optimizer step of ``rank``: seconds, Unix end time; ``tokens`` normalises drift.
        A ``profiled`` step (the agent's own profiler was on) counts for liveness and as a
        pause of kind "profiler", never for drift or stragglers. A step with a marked
        ``phase`` (evaluation, checkpoint... marked by the user or an integration) is left out
        the same way when the phase delayed it (at least _MARK_DELAY x the median of the rank's
        last 64 steps, marked or not; before 8 are known, always); otherwise it is a plain step;
        a run of steps marked with one kind counts as one pause of that kind
        (at most _MAX_PHASE_KINDS kinds per rank, later ones count as "other")."""
        self.steps(job, rank, [step], [time], [step_time_s], [wait_s],
                   [tokens] if tokens is not None else None, (0,) if profiled else (),
                   {0: phase} if phase else None)

    def steps(self, job: str, rank: int, step: list, end_time_s: list, duration_s: list, dataloader_wait_s: list,
              tokens: Optional[list] = None, profiled: Sequence[int] = (),
              phases: Optional[dict] = None) -> None:
        """A batch of ``rank``'s steps as columns (equal-length lists, in arrival order), the
        detectors fed a batch at a time (what feeding them step by step gives: tests/collector/
        detect/test_batch_path.py).
        ``tokens``: per step or None; ``profiled``: indices of profiled steps; ``phases``:
        {index: marked phase name}."""
        n = len(step)
        if not n:
            return
        r = self._rank(job, rank)
        r.live.steps(step, end_time_s, duration_s)
        self.lineage.seen(job, rank, step[0], end_time_s[-1])
        r.memory.step = step[-1]
        keep = r.kept(step, end_time_s, duration_s, profiled, phases, self.cfg.warmup_steps)
        if not self.cfg.enabled:
            return
        if keep is not None:
            if not keep:
                return
            step, end_time_s = [step[i] for i in keep], [end_time_s[i] for i in keep]
            dataloader_wait_s, tokens = [dataloader_wait_s[i] for i in keep], [tokens[i] for i in keep] if tokens else None
            duration_s = [duration_s[i] for i in keep]
        if self.cfg.drift.enabled and self.cfg.drift.evidence:
            r.evidence.steps(end_time_s, dataloader_wait_s)
        if self.cfg.drift.enabled and (r.drift.feed_many(step, end_time_s, r.per_token(duration_s, tokens))
                                       or r.drift.condition):
            self._sync(r.drift, [r.drift.condition] if r.drift.condition else [])
        if self.cfg.straggler.enabled:
            s = self._straggler(job)
            if s.feed_many(rank, step, end_time_s, duration_s, dataloader_wait_s) or s.conditions:
                self._sync(s, s.conditions.values())

    def _straggler(self, job: str) -> StragglerDetector:
        s = self._stragglers.get(job)
        if s is None:
            s = self._stragglers[job] = StragglerDetector(self.cfg.straggler, job)
        return s

    def phase_times(self, job: str, rank: int, steps: list, pres: list, owns: list, syncs: list,
                    batch_first_step: Optional[int] = None) -> None:
        """Sampled phase times of ``rank`` per step in seconds (before the collectives: data +
        forward + optimizer; own: all but sync; sync), for the straggler rule; fed before the
        batch's steps (``batch_first_step``: the first of them, if any). Samples of the rank's
        first ``warmup_steps`` steps are left out, as its step times are: the agent takes its
        first samples on the first steps (to learn what one costs), and where samples are sparse
        a rank's pool reaches back to them (a 2-rank CPU job: rank 1's samples of steps 3-5 in
        its pool at step 140 made it slower than rank 0 before anything was injected)."""
        r = self._rank(job, rank)
        if not (self.cfg.enabled and self.cfg.straggler.enabled and steps):
            return
        first = r.first_step
        if first is None:
            first = r.first_step = batch_first_step if batch_first_step is not None else steps[0]
        warm_end = first + self.cfg.warmup_steps
        if steps[0] < warm_end:
            keep = [i for i, s in enumerate(steps) if s >= warm_end]
            if not keep:
                return
            steps, pres, owns, syncs = ([v[i] for i in keep] for v in (steps, pres, owns, syncs))
        self._straggler(job).phases(rank, steps, pres, owns, syncs)

    def phase_samples(self, job: str, rank: int, end_time_s: list, points: list, device: list, host: list) -> None:
        """Sampled steps' phase times of ``rank`` (``device``, ``host``: five columns of seconds
        each, data, forward, backward, sync, optimizer; ``points``: the points seen), the
        evidence drift decides with (:mod:`._evidence`)."""
        r = self._rank(job, rank)
        if self.cfg.enabled and self.cfg.drift.enabled and self.cfg.drift.evidence and end_time_s:
            r.evidence.phase_samples(end_time_s, points, device, host)

    def window(self, job: str, rank: int, w: WindowPoint) -> None:
        """One profiler window of ``rank`` (compute and communication per step): a rank whose
        compute is slow hides in the collectives, where only the windows see it."""
        self._rank(job, rank)
        if self.cfg.enabled and self.cfg.straggler.enabled:
            s = self._straggler(job)
            if s.window(rank, w) or s.conditions:
                self._sync(s, s.conditions.values())

    def allocator(self, job: str, rank: int, p: AllocatorPoint) -> None:
        self.allocators(job, rank, (p,))

    def allocators(self, job: str, rank: int, points: Sequence[AllocatorPoint]) -> None:
        """:meth:`allocator` for each of a batch's samples, in order."""
        r = self._rank(job, rank)
        if self.cfg.enabled and self.cfg.memory.enabled:
            memory = r.memory
            for p in points:
                if memory.allocator(p) or memory.conditions:
                    self._sync(memory, memory.conditions.values())

    def allocator_columns(self, job: str, rank: int, table: SampleTable) -> None:
        """:meth:`allocators` for a batch given as a :class:`SampleTable` (AllocatorPoint's
        fields, the time as ``time_s``). The usual batch makes a point only of the samples the
        leak trend keeps and of the last one, and reads only the columns that decide that:
        what feeding every sample gives (tests/collector/detect/test_batch_path.py)."""
        r = self._rank(job, rank)
        if len(table) and self.cfg.enabled and self.cfg.drift.enabled and self.cfg.drift.evidence:
            r.evidence.allocator(table["time_s"], [a + f for a, f in zip(table["device_allocs"], table["device_frees"])])
        if not len(table) or not (self.cfg.enabled and self.cfg.memory.enabled):
            return
        memory = r.memory
        due = memory.allocators_due(table["time_s"], table["reserved_bytes"], table["inactive_split_bytes"],
                                    table["alloc_retries"], table["ooms"])
        if due is None:
            self.allocators(job, rank, list(map(AllocatorPoint, *[table[f] for f in _ALLOCATOR_FIELDS])))
            return
        for i in due:
            if memory.allocator(AllocatorPoint(*[table[f][i] for f in _ALLOCATOR_FIELDS])) or memory.conditions:
                self._sync(memory, memory.conditions.values())
        memory.keep_allocator(AllocatorPoint(*[table.last(f) for f in _ALLOCATOR_FIELDS]))
        if memory.conditions:  # (as after each sample: the same conditions, synced once)
            self._sync(memory, memory.conditions.values())

    def gpu(self, job: str, rank: int, p: GpuPoint) -> None:
        self.gpus(job, rank, (p,))

    def gpus(self, job: str, rank: int, points: Sequence[GpuPoint]) -> None:
        """:meth:`gpu` for each of a batch's samples, in order."""
        r = self._rank(job, rank)
        judge = self.cfg.enabled and self.cfg.gpu.enabled
        if points and r.throttle is None:
            mask = self.cfg.gpu.throttle_mask
            if not judge or not any(p.clock_event_reasons and p.clock_event_reasons & mask for p in points):
                r.memory.gpu(points[-1])  # (no throttling held or seen: only the last sample is kept)
                return
        for p in points:
            r.memory.gpu(p)
            if judge:
                old = r.throttle
                r.throttle = throttle_condition(self.cfg.gpu, job, rank, p, old, r.live.last_step)
                if r.throttle is not None or old is not None:  # (neither: nothing held to sync)
                    self._sync(("throttle", job, rank), [r.throttle] if r.throttle else [])

    def gpu_columns(self, job: str, rank: int, table: SampleTable) -> None:
        """:meth:`gpus` for a batch given as a :class:`SampleTable` (GpuPoint's fields, the time
        as ``time_s``; unset fields are None): a point of the last sample only, unless
        throttling is held or seen."""
        r = self._rank(job, rank)
        if not len(table):
            return
        if self.cfg.enabled and self.cfg.straggler.enabled:
            self._activity(job, rank, table)
        if self.cfg.enabled and self.cfg.drift.enabled and self.cfg.drift.evidence:
            r.evidence.gpu(table["time_s"], table.optional("sm_active_ratio"))
        if r.throttle is None and (not (self.cfg.enabled and self.cfg.gpu.enabled) or not any(
                [x & self.cfg.gpu.throttle_mask for x in table["clock_event_reasons"] if x])):
            r.memory.gpu(GpuPoint(table.last("time_s"), *[table.last(f, optional=True) for f in _GPU_FIELDS]))
            return
        self.gpus(job, rank, list(map(GpuPoint, table["time_s"], *[table.optional(f) for f in _GPU_FIELDS])))

    def _activity(self, job: str, rank: int, table: SampleTable) -> None:
        """The GPU's compute-pipe activity (GPM tensor + FP16 + FP32 + FP64, summed; None where a
        sample has no GPM reading: its SM activity unset) to the job's straggler rule."""
        seen = table.optional("sm_active_ratio")  # (presence asked of one column: the others read 0 unset)
        if any(v is not None for v in seen):
            values = [None if v is None else sum(vs) for v, *vs in zip(seen, *[table[f] for f in _PIPES])]
            s = self._straggler(job)
            if s.activity(rank, table["time_s"], values) or s.conditions:
                self._sync(s, s.conditions.values())

    def host_columns(self, job: str, rank: int, table: SampleTable) -> None:
        """:meth:`hosts` for a batch given as a :class:`SampleTable` (``time_s``,
        ``resident_memory_bytes``, ``host_memory_available_bytes`` or None): a point only of
        the samples the leak trend keeps."""
        r = self._rank(job, rank)
        if not len(table) or not (self.cfg.enabled and self.cfg.memory.enabled):
            return
        memory = r.memory
        due = memory.host_due(table["time_s"])
        if due:
            times, resident = table["time_s"], table["resident_memory_bytes"]
            available = table.optional("host_memory_available_bytes")
            for i in due:
                if memory.host(HostPoint(times[i], resident[i]), available[i]) or memory.conditions:
                    self._sync(memory, memory.conditions.values())
        if memory.conditions:  # (as after each sample: the same conditions, synced once)
            self._sync(memory, memory.conditions.values())

    def host(self, job: str, rank: int, p: HostPoint, available_bytes: Optional[int] = None) -> None:
        self.hosts(job, rank, ((p, available_bytes),))

    def hosts(self, job: str, rank: int, points: Sequence[tuple]) -> None:
        """:meth:`host` for each ``(HostPoint, available bytes or None)`` of a batch, in order."""
        r = self._rank(job, rank)
        if self.cfg.enabled and self.cfg.memory.enabled:
            memory = r.memory
            for p, available in points:
                if memory.host(p, available) or memory.conditions:
                    self._sync(memory, memory.conditions.values())

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

    def drift_reference(self, job: str, rank: int) -> Optional[tuple[float, float]]:
        """:meth:`DriftDetector.reference_span` of the rank's drift detector (None without one)."""
        r = self._ranks.get((job, rank))
        return r.drift.reference_span() if r is not None else None

    def the_jobs_own(self, job: str, rank: int, evidence: str) -> None:
        """The rank's open drift episode, raised as the profiler's after-effect, is the job's
        own (:meth:`DriftDetector.the_jobs_own`)."""
        r = self._ranks.get((job, rank))
        if r is not None and r.drift.the_jobs_own(evidence):
            self._sync(r.drift, [r.drift.condition])

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
        self.lineage.hello(job, rank, ident, now)
        dropped = old is not None and old != ident.session and key in self._ranks
        if dropped:
            self._drop(job, rank)
        self._sync(("runs", job), self.lineage.conditions(job))
        return dropped

    def sessions(self, job: str, rank: int, live: dict, now: float) -> None:
        """The agent sessions connected as ``rank`` of ``job`` (``{session_id: "host pid N"}``).
        More than one is a misconfigured job (launcher without RANK, re-imported scripts): their
        steps would add up under one rank, so it is an alert."""
        conds = []
        if len(live) > 1:
            who = ", ".join(sorted(live.values()))[:300]
            conds.append(Condition(
                DUPLICATE_RANK, job, rank, WARNING,
                f"{len(live)} agent sessions report as rank {rank} of job {job} ({who}); their steps add "
                f"up under one rank: give each process its own RANK (or attach(job=...))", now,
                for_s=self.cfg.liveness.duplicate_for_s))
        self._sync(("dup", job, rank), conds)

    def agent_events(self, job: str, rank: int, events: Sequence[tuple]) -> None:
        """The agent's events ``(time_s, kind, message)`` of one batch. A ``window_aftereffect``
        event (the agent dropped a kind of profiler session that left the job slower) is noted
        in the rank's open StepwatchProfilerOverhead episode. A ``sidecar_restarted``
        event at the agent's restart cap ("restart 5 of 5") raises StepwatchAgentRestartCap for
        the rank: one more death of its sidecar and the rank reports nothing more, which the
        collector could otherwise only see as a rank gone quiet. It lasts while the rank is known
        (until it expires, agent_grace_s after its last stream)."""
        for t, kind, message in events:
            if kind == "window_aftereffect":
                r = self._ranks.get((job, rank))
                if r is not None and r.drift.backed_off(t, message):
                    self._sync(r.drift, [r.drift.condition])
                continue
            if kind != "sidecar_restarted":
                continue
            m = _RESTART.search(message)
            if m is None or int(m.group(1)) < int(m.group(2)):
                continue
            summary = (f"the stepwatch sidecar of this rank died and was restarted {m.group(1)} of "
                       f"{m.group(2)} times (the agent's cap): when it dies again this rank stops "
                       f"reporting until the job restarts; the trainer's log says why it died")
            self._sync(("cap", job, rank), [Condition(AGENT_RESTART_CAP, job, rank, WARNING,
                                                      summary, t)])

    def forget(self, job: str, rank: int) -> None:
        """Drop a rank (expired in the collector); its conditions end, and its run once all the
        run's ranks have gone."""
        self._session.pop((job, rank), None)
        if self.lineage.left(job, rank):
            self._sync(("runs", job), self.lineage.conditions(job))
        self._drop(job, rank)

    def _drop(self, job: str, rank: int) -> None:
        self._saved.pop((job, rank), None)
        self._sync(("dup", job, rank), [])
        self._sync(("cap", job, rank), [])
        self._owned.pop(("cap", job, rank), None)
        r = self._ranks.pop((job, rank), None)
        if r is None:
            return
        for owner in (r.drift, r.memory, ("throttle", job, rank), ("live", job, rank)):
            self._sync(owner, [])
            self._owned.pop(owner, None)
        s = self._stragglers.get(job)
        if s is not None and s.forget(rank):
            self._sync(s, s.conditions.values())

    def tick(self, now: float) -> None:
        """Judge stalls, agent-gone and expiring holds at Unix time ``now`` (O(ranks))."""
        for _ in self.tick_slices(now):
            pass

    def tick_slices(self, now: float, per: int = TICK_SLICE) -> Iterator[None]:
        """:meth:`tick` in slices of ``per`` ranks: a generator that yields between slices, so
        the event loop can take other work (acks) in between (10,000 ranks: 30 ms of this tick
        on the development machine's core, in one piece before). The ranks are those held when
        it starts; one forgotten or replaced before its slice is skipped, and ingest may have
        fed a rank in between (judged as it is then)."""
        if not self.cfg.enabled:
            return
        ranks = list(self._ranks.items())
        connected: dict[str, int] = {}
        last_gone: dict[str, float] = {}  # job -> when its last rank disconnected
        for i, ((job, _), r) in enumerate(ranks):
            connected[job] = connected.get(job, 0) + (1 if r.live.connected else 0)
            gone = r.live.disconnected_at
            if not r.live.connected and gone is not None:
                last_gone[job] = max(last_gone.get(job, gone), gone)
            if i % per == per - 1:
                yield
        for i, ((job, rank), r) in enumerate(ranks):
            if i % per == per - 1:
                yield
            if self._ranks.get((job, rank)) is not r:
                continue
            # A job none of whose ranks is connected any more has ended (or lost its collector):
            # its slowdown episodes end, so they resolve within a minute instead of firing on
            # until the ranks expire (agent_grace_s).
            if r.drift.condition is not None and not connected[job] and job in last_gone \
                    and now - last_gone[job] >= _ENDED_AFTER_S:
                r.drift.end_episode()
                self._sync(r.drift, [])
            if r.memory.tick(now) or r.memory.conditions:
                self._sync(r.memory, r.memory.conditions.values())
            others = connected[job] - (1 if r.live.connected else 0)
            conds = [c for c in (r.live.stalled(now), r.live.gone(now, others)) if c is not None]
            self._sync(("live", job, rank), conds)
        for job in self.lineage.tick(now, self._settled):
            self._sync(("runs", job), self.lineage.conditions(job))

    def _settled(self, job: str, rank: int) -> Optional[tuple]:
        r = self._ranks.get((job, rank))
        return r.drift.settled() if r is not None else None

    def armed(self, job: Optional[str] = None) -> dict[tuple, bool]:
        """``{(job, rank): armed}``: whether the rank's drift detector has its settled level
        (warm-up and settling over; before, nothing is judged); ``job``: that job's ranks only."""
        return {key: r.drift.armed for key, r in list(self._ranks.items()) if job is None or key[0] == job}

    def settling_again(self, job: Optional[str] = None) -> dict[tuple, float]:
        """``{(job, rank): onset}`` for the ranks that settle again because a shift found after
        arming began inside their settling time (:attr:`DriftDetector.settling_again_since`);
        ``job``: that job's ranks only."""
        return self._drift_values(job, lambda d: d.settling_again_since)

    def arming(self, job: Optional[str] = None) -> dict[tuple, tuple]:
        """``{(job, rank): (armed_at, last step's end time)}`` for the ranks not armed yet: the
        data time their drift detector arms at (:attr:`DriftDetector.armed_at`) and how far the
        rank's data has got; ``job``: that job's ranks only."""
        out = {}
        for key, r in list(self._ranks.items()):
            at = r.drift.armed_at
            if at is not None and (job is None or key[0] == job) and r.live.last_time is not None:
                out[key] = (at, r.live.last_time)
        return out

    def reach(self, job: Optional[str] = None) -> dict[tuple, dict[str, float]]:
        """``{(job, rank): {severity: ratio}}`` for the armed ranks: the smallest sustained
        step-time shift each severity can raise now at the rank's own noise
        (:meth:`DriftDetector.reach`, kept per rank when its spreads are measured);
        ``job``: that job's ranks only. 4.6 ms for 10,000 armed ranks on the 2-core development
        machine, as :meth:`armed` (5.3 ms); computed per call it was 46 ms."""
        return self._drift_values(job, RankDrift.reach)

    def _drift_values(self, job: Optional[str], value) -> dict:
        """``{(job, rank): value(its drift detector)}`` where that is not None; ``job``: that
        job's ranks only."""
        out = {}
        for key, r in list(self._ranks.items()):
            if job is None or key[0] == job:
                got = value(r.drift)
                if got is not None:
                    out[key] = got
        return out

    def pauses(self) -> dict[tuple, dict[str, int]]:
        """``{(job, rank): {kind: count}}``: pause episodes the drift detector left out
        ("stall": one step, "pause": several), steps the agent profiled ("profiler") and
        marked phases (their kind: "eval", "checkpoint", ...)."""
        out = {}
        for key, r in list(self._ranks.items()):
            kinds = dict(r.drift.pauses)
            for kind, n in list(r.marked.items()):  # a scrape thread reads this
                kinds[kind] = kinds.get(kind, 0) + n
            if r.profiled:
                kinds["profiler"] = r.profiled
            if kinds:
                out[key] = kinds
        return out

    def conditions(self) -> list[Condition]:
        return list(self._active.values())

    def rank_keys(self) -> set:
        return set(self._ranks)

    def last_step(self, job: str, rank: int) -> Optional[int]:
        r = self._ranks.get((job, rank))
        return r.live.last_step if r is not None else None
