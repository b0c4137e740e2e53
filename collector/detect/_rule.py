"""The rule seam of detect/: what a detection rule is fed, how it is asked to judge time and to
forget a rank, and how what it finds reaches the engine.

A rule is one object per :class:`~._engine.DetectionEngine`, built from the detection config
and a :class:`Context`; it keeps its own state per (job, rank) or per job. For each batch of
each rank the engine calls, in this order, the feeds the batch has: :meth:`Rule.phases`,
:meth:`Rule.steps`, :meth:`Rule.allocator`, :meth:`Rule.gpu`, :meth:`Rule.host`,
:meth:`Rule.events`, :meth:`Rule.window` (one per profiler window). :meth:`Rule.tick` judges
time; :meth:`Rule.forget` drops a rank. A rule overrides only what it reads.

What holds is handed to :meth:`Context.emit`: ``emit(owner, conditions)`` replaces the
conditions that ``owner`` (a key of the rule's choosing: a rank's detector, a job's, a tuple)
held; an owner with nothing to say emits ``[]``. Conditions carry their evidence as values
(:class:`~._types.Condition`'s ``backing``, ``found``, ``comparison``), never only as text.

Contract: one caller at a time (the engine's). A feed is O(rows) amortised; it never raises on
data the wire let through (out-of-order times, unset fields read as 0 or None).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional, Sequence

from ._types import Condition, SampleTable, WindowPoint

if TYPE_CHECKING:  # (types only: the engine imports the rules)
    from ._config import DetectionConfig
    from ._liveness import RankLiveness
    from ._run_record import RunIdentity

__all__ = ["Rule", "Context", "Steps", "Phases", "ConditionSet"]


@dataclasses.dataclass
class Steps:
    """A batch of one rank's steps as columns (equal-length lists, in arrival order).
    ``judged``: the indices the slowdown rules judge (None: all of them); the others are the
    rank's warm-up, steps its own profiler was on, and marked steps their phase delayed (the
    engine decides once per batch). ``window_ends``: ``(step, end time)`` of the last step of
    each run of profiled steps (a profiler window's end)."""

    step: list
    end_time_s: list
    duration_s: list
    dataloader_wait_s: list
    tokens: Optional[list] = None
    judged: Optional[list] = None
    window_ends: list = dataclasses.field(default_factory=list)
    _kept: Optional["Steps"] = dataclasses.field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.step)

    def kept(self) -> "Steps":
        """The judged steps as a Steps of their own (this one when all are judged)."""
        if self.judged is None:
            return self
        if self._kept is None:
            k = self.judged
            self._kept = Steps([self.step[i] for i in k], [self.end_time_s[i] for i in k],
                               [self.duration_s[i] for i in k], [self.dataloader_wait_s[i] for i in k],
                               [self.tokens[i] for i in k] if self.tokens else None)
        return self._kept


@dataclasses.dataclass
class Phases:
    """Sampled steps' phase times of one rank: per sampled step its number, end time, the
    points the agent saw (``points``: a bit set, :data:`SYNC_SEEN` marks the gradients and the
    optimizer start seen, the phases apart) and seconds per phase on the device and on the host
    (``device``, ``host``: five columns each, data, forward, backward, sync, optimizer).
    ``batch_first_step``: the first step of the batch the samples came with, if it has steps."""

    step: list
    end_time_s: list
    points: list
    device: Sequence[list]
    host: Sequence[list]
    batch_first_step: Optional[int] = None


SYNC_SEEN = 0b1110  # Phases.points: the first and last gradient (bits 1, 2), the optimizer start (3)


class ConditionSet:
    """The conditions every rule emitted, by owner: ``active`` {key: Condition}; ``touched`` the
    keys that came, changed or went since :meth:`take_touched`."""

    def __init__(self):
        self.active: dict[tuple, Condition] = {}
        self._owned: dict[object, set] = {}
        self.touched: set = set()

    def emit(self, owner: object, conds: Iterable[Condition]) -> None:
        """``conds`` replace what ``owner`` held."""
        if not conds and not self._owned.get(owner):  # the usual tick of a quiet rank
            return
        new = {c.key: c for c in conds}
        for key in self._owned.get(owner, set()) - new.keys():
            self.active.pop(key, None)
            self.touched.add(key)
        for key, c in new.items():
            if self.active.get(key) != c:
                self.active[key] = c
                self.touched.add(key)
        if new:
            self._owned[owner] = set(new)
        else:
            self._owned.pop(owner, None)

    def take_touched(self) -> set:
        touched, self.touched = self.touched, set()
        return touched


class Context:
    """What the engine gives its rules: ``emit`` (see the module), each rank's liveness
    (``live(job, rank)``: last step and time, connection; None for a rank not held), the agent
    session a rank's data comes from, the drift rule's settled level of a rank (``settled``),
    and during a tick which ranks of each job are connected."""

    def __init__(self, emit: Callable[[object, Iterable[Condition]], None],
                 live: Callable[[str, int], Optional["RankLiveness"]],
                 session: Callable[[str, int], str]):
        self.emit = emit
        self.live = live
        self.session = session
        # during a tick: job -> ranks connected; job -> when its last rank disconnected
        self.connected: dict[str, int] = {}
        self.last_gone: dict[str, float] = {}
        self.settled: Callable[[str, int], Optional[tuple]] = lambda job, rank: None

    def others_connected(self, job: str, rank: int) -> int:
        """During a tick: the job's connected ranks but ``rank``."""
        live = self.live(job, rank)
        return self.connected.get(job, 0) - (1 if live is not None and live.connected else 0)

    def ended(self, job: str, now: float, after_s: float) -> bool:
        """During a tick: none of the job's ranks is connected, the last gone ``after_s`` ago."""
        return not self.connected.get(job) and job in self.last_gone and now - self.last_gone[job] >= after_s


class Rule:
    """A detection rule (see the module). ``cfg`` is the whole detection config; a rule reads
    its own section and ``cfg.enabled``."""

    def __init__(self, cfg: "DetectionConfig", ctx: Context):
        self.cfg = cfg
        self.ctx = ctx

    def added(self, job: str, rank: int) -> None:
        """``rank`` of ``job`` is first seen (any feed): a rule may restore saved state."""

    def hello(self, job: str, rank: int, ident: "RunIdentity", now: float) -> None:
        """An agent session became the only one of the rank (its first, or a new run's)."""

    def phases(self, job: str, rank: int, p: Phases) -> None:
        """Sampled phase times, fed before the batch's steps."""

    def steps(self, job: str, rank: int, s: Steps) -> None:
        """A batch of steps (every one; ``s.kept()`` is what slowdown rules judge)."""

    def allocator(self, job: str, rank: int, table: SampleTable) -> None:
        """CUDA allocator samples (the wire's fields, the time as ``time_s``)."""

    def gpu(self, job: str, rank: int, table: SampleTable) -> None:
        """NVML samples (the wire's fields; unset ones None through ``table.optional``)."""

    def host(self, job: str, rank: int, table: SampleTable) -> None:
        """psutil host samples."""

    def events(self, job: str, rank: int, events: Sequence[tuple]) -> None:
        """The agent's events ``(time_s, kind, message)`` of one batch."""

    def window(self, job: str, rank: int, w: WindowPoint) -> None:
        """One profiler window's summary."""

    def tick(self, now: float, per: int) -> Iterator[None]:
        """Judge time at Unix time ``now``; a generator that yields after each ``per`` ranks or
        jobs it judged (the event loop takes other work in between)."""
        return iter(())

    def forget(self, job: str, rank: int, expired: bool) -> None:
        """Drop the rank's state and end its conditions: it ``expired`` in the collector, or
        (False) its agent session changed and its data now comes from a new run."""
