"""Episode: the open episode of a drift detector (what it is measured against, its onset and
further changes, its evidence, the agent's notes) and the Condition it shows.

Severity only rises while the change lasts, one level at a time. The ratio and summary follow
the sustained level; the summary says what the shift is measured against ("vs this job's level
settled at HH:MM UTC, N min before the onset" or "vs the level before"), the step time before
and now, where the episode began after a further change, the profiler window it is taken for,
the agent's back-off, and how it was decided (its evidence, or the step times alone).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Optional

from ._config import DriftConfig
from ._evidence import PHASE_TIMES
from ._names import PROFILER_OVERHEAD, THROUGHPUT_DRIFT
from ._types import Backing, Condition

__all__ = ["DriftText", "Episode", "clock", "before_onset", "evidence_note"]

# The end of a drift summary when the step times alone decided the episode: the evidence was
# compared and no one source held the shift (a source may have moved with others alike: a host
# that runs slower lengthens every phase it paces)
_STEPS_NOTE = "; no one thing the agent measures beside the step time holds it (the host's own pace?)"


def clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M UTC")


# ... and when a further change that nothing holds came on top of a change its evidence held
_ON_TOP_NOTE = "; the further change: no one thing the agent measures beside the step time holds it"


def evidence_note(decided: str, backing: Optional[Backing], on_top: bool = False) -> str:
    """The end of a drift summary that says how the episode was decided (``Episode.decided``):
    "; a change of the job: <its evidence>", the step times alone, or nothing (not known);
    ``on_top``: the latest further change is held by nothing, on top of the job's change that
    ``backing`` held."""
    if decided == "job" and backing is not None:
        return f"; a change of the job: {backing.text()}" + (_ON_TOP_NOTE if on_top else "")
    return _STEPS_NOTE if decided == "steps" else ""


@dataclasses.dataclass(frozen=True)
class DriftText:
    """The parts of a drift summary (``Condition.text``); ``str()`` renders it: the shift over
    ``base_ms`` (``which``: "p10 step " on the floor detector), what it is measured against
    (``ref_text``), the onset's step, where the episode began after a further change
    (``further``), the agent's notes (``window_note``) and how it was decided with its evidence."""

    shift: float
    ref_text: str
    which: str
    base_ms: float
    step: int
    further: str = ""
    window_note: str = ""
    decided: str = ""
    evidence: Optional[Backing] = None
    on_top: bool = False

    def __str__(self) -> str:
        return (f"step time {self.shift:+.1%} {self.ref_text} ({self.which}{self.base_ms:.1f} ms -> "
                f"{self.base_ms * (1 + self.shift):.1f} ms) since step {self.step:,}{self.further}{self.window_note}"
                f"{evidence_note(self.decided, self.evidence, self.on_top)}")


def before_onset(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.0f} h before the onset"
    return f"{max(1, round(seconds / 60))} min before the onset"


class Episode:
    """``judged_with_evidence``: the detector decides with the rank's evidence (else ``decided``
    is ""). ``version`` changes whenever the shown condition or the saved episode would."""

    def __init__(self, cfg: DriftConfig, job: str, rank: int, quantile: float, judged_with_evidence: bool):
        self.cfg, self.job, self.rank, self.quantile = cfg, job, rank, quantile
        self._with_evidence = judged_with_evidence
        self.ref: Optional[float] = None  # log seconds: the level the episode is measured against
        self.ref_text = ""
        self.raised = 0.0  # log shift the episode was raised on
        self.alertname, self.window_note = THROUGHPUT_DRIFT, ""
        self.window_step: Optional[int] = None  # the profiler window an overhead episode names
        self.backoff: Optional[tuple[float, str]] = None  # the agent's last back-off (time, message)
        self.onset: Optional[tuple[int, float]] = None
        self.change = 0  # further changes in the open episode
        self.peak = 0.0  # largest log shift measured in the open episode
        self.began: Optional[tuple[int, float]] = None  # (onset step, raised ratio) of the episode's start
        self.backing: Optional[Backing] = None  # the open episode's evidence at its latest onset
        self.unknown: tuple = ()  # the sources of evidence that could not be compared there
        self.backing_span: Optional[tuple] = None  # (lo, edge, step s) the evidence was read against
        # (evidence, span) of the latest onset that evidence held: the job's change the episode
        # holds, kept through a further change that nothing holds (the host's pace on top of
        # it), so that the episode still ends once that change has gone (ShiftTests.evidence_gone)
        self.held: Optional[tuple[Backing, tuple]] = None
        self.against_before = False  # the latest onset a further change measured against the level before it
        # (evidence, span) a slow change was raised on, since the rank settled
        # (ShiftTests.since_settled), kept through further changes: what ShiftTests.slow_holds reads
        self.slow: Optional[tuple[Backing, tuple]] = None
        self.condition: Optional[Condition] = None
        self.version = 0

    def end(self) -> None:
        """The open episode, if any, ends."""
        if self.condition is not None:
            self.condition, self.onset, self.ref = None, None, None
            self.change, self.began = 0, None
            self.backing, self.unknown, self.backing_span = None, (), None
            self.held, self.against_before, self.slow = None, False, None
            self.version += 1

    def open(self, sev: str, onset: tuple[int, float], ref: float, shift: float, window: Optional[int],
             backing: tuple, settled_at: Optional[float], slow: bool = False) -> bool:
        """Raise an episode at ``sev``: a shift of ``shift`` (log) above ``ref`` from ``onset``
        (step, Unix time), with what :meth:`ShiftTests.backing_at` read there; ``window``: the
        agent's profiler window it began at (then it is stepwatch's own cost), or None;
        ``settled_at``: when the job's level it is compared with was settled (None: the level
        before); ``slow``: raised on its evidence read against the settling span. True when the
        condition changed (or a back-off already heard is noted)."""
        onset_at = onset[1]
        self.backing, self.unknown, self.backing_span = backing
        self.held = None
        self.slow = (backing[0], backing[2]) if slow and backing[0] is not None and backing[2] is not None else None
        self._hold()
        self.onset, self.ref, self.raised = onset, ref, shift
        self.against_before = False
        self.alertname, self.window_note, self.window_step = THROUGHPUT_DRIFT, "", window
        if window is not None:
            self.alertname = PROFILER_OVERHEAD
            self.window_note = (f"; it began when the agent's profiler window ending at step {window:,} "
                                "closed: stepwatch's own cost, not the job's (the agent backs off)")
        if settled_at is not None:  # (a time relative to the onset stays true however late it is read)
            self.ref_text = (f"vs this job's level settled at {clock(settled_at)}, "
                             f"{before_onset(onset_at - settled_at)}")
        else:
            self.ref_text = "vs the level before"
        changed = self.set(sev, shift)
        return self.note_backoff() or changed

    def further(self, step: int, onset_at: float, shift: float, backing: tuple, before: bool = False) -> bool:
        """A further change of ``shift`` (log, over the level the episode was raised on) from
        ``onset_at`` (``step``), with what :meth:`ShiftTests.backing_at` read there: the episode
        takes the new onset, keeps where it began and raises its shift by it; ``before``: the
        change was measured against the episode's level just before it (its evidence's span is
        then what a diagnosis compares with). True when the condition changed."""
        if self.began is None:
            self.began = (self.onset[0], math.expm1(self.raised))
        self.onset = (step, onset_at)
        self.backing, self.unknown, self.backing_span = backing
        self._hold()
        self.against_before = before
        self.raised += shift
        self.change += 1
        return self.set(self.condition.severity, self.raised)

    def reread(self, backing: tuple) -> bool:
        """The open episode's evidence read again at its onset (``backing`` as :meth:`open`
        takes it), its severity and shift as they stand. True when the condition changed."""
        self.backing, self.unknown, self.backing_span = backing
        self._hold()
        return self.set(self.condition.severity, math.log(self.condition.ratio))

    def _hold(self) -> None:
        """The latest onset's evidence becomes what the episode holds, when there is any."""
        if self.backing is not None and self.backing_span is not None:
            self.held = (self.backing, self.backing_span)

    def set(self, sev: str, shift_log: float) -> bool:
        """Show the episode at ``sev`` and ``shift_log`` (log units over ``ref``); True when the
        condition changed."""
        shift = math.expm1(shift_log)
        step, since = self.onset
        base_ms = math.exp(self.ref) * 1e3
        further = ""
        if self.began is not None:
            further = (f" (a further change: the episode began at step {self.began[0]:,} at "
                       f"{self.began[1]:+.1%})")
        q = self.quantile
        which = "" if q == 0.5 else f"p{100 * q:.0f} step "
        evidence, on_top = self.evidence()
        text = DriftText(shift, self.ref_text, which, base_ms, step, further, self.window_note, self.decided(),
                         evidence, on_top)
        old = self.condition
        self.version += 1
        self.peak = max(self.peak, shift_log)
        self.condition = Condition(self.alertname, self.job, self.rank, sev, str(text),
                                   since, step, self.cfg.for_s, ratio=1 + shift, change=self.change,
                                   evidence=evidence, decided=self.decided(), text=text)
        return self.condition != old

    def evidence(self) -> tuple[Optional[Backing], bool]:
        """The evidence the episode shows and whether its latest further change is held by nothing
        on top of it: the latest onset's, else the job's change it holds through such a further
        change (``held``). A live H100 job's ``empty_cache()`` episode, raised on the allocator's
        calls and the sync phase, grew from +19% to +47% over the turn with its host slowing in
        every phase; shown as "no one thing ... holds it (the host's own pace?)" with the earlier
        onset's evidence dropped, its text contradicted its own start
        (tests/data/real/diag/h100x)."""
        if self.backing is not None:
            return self.backing, False
        if self.held is not None and self.began is not None:
            return self.held[0], True
        return None, False

    def decided(self) -> str:
        """How the episode was decided: "job" (its evidence holds it, or held the change that a
        further change nothing holds came on top of), "steps" (the step times alone: no evidence
        holds it), "" (its evidence could not be compared, or is not asked)."""
        if not self._with_evidence:
            return ""
        if self.evidence()[0] is not None:
            return "job"
        return "" if PHASE_TIMES in self.unknown else "steps"

    def backed_off(self, t: float, message: str) -> bool:
        """The agent's ``window_aftereffect`` event (at ``t``): it found a session's lasting
        after-effect and dropped that kind of session. An open StepwatchProfilerOverhead episode
        says so; when the job then recovers it resolves with that in its summary, and when it
        does not, the summary shows the back-off did not help. An event that comes before the
        episode is raised (the agent's check can end before the collector's window: a slow CPU
        host) is noted when it is, if it came after the episode's onset. True when it changed."""
        self.backoff = (t, message)
        return self.note_backoff()

    def note_backoff(self) -> bool:
        """Note the agent's last back-off in the open StepwatchProfilerOverhead episode, once,
        if it came after the episode's onset. True when it changed."""
        if (self.backoff is None or self.condition is None or self.alertname != PROFILER_OVERHEAD
                or "backed off" in self.window_note):
            return False
        t, message = self.backoff
        if self.onset is not None and t < self.onset[1] - self.cfg.bucket_s:
            return False  # (an earlier window's)
        what = message.split("; ", 2)[1] if message.count("; ") >= 2 else "it dropped that kind of session"
        self.window_note += f"; the agent backed off at {clock(t)} ({what[:80]})"
        return self.set(self.condition.severity, math.log(self.condition.ratio))

    def the_jobs_own(self, evidence: str) -> bool:
        """The open episode, raised as the profiler's after-effect, is the job's own
        (``evidence`` says why: a cause no profiler window makes): it becomes throughput drift,
        its summary says what it was first taken for. True when it changed."""
        if self.condition is None or self.alertname != PROFILER_OVERHEAD:
            return False
        window = (f"profiler window ending at step {self.window_step:,}" if self.window_step is not None
                  else "profiler window")  # (a state saved without the window's step)
        self.alertname = THROUGHPUT_DRIFT
        self.window_note = (f"; first taken for the agent's {window} "
                            f"(it closed as the step time rose), but {evidence[:160]} is the job's own")
        return self.set(self.condition.severity, math.log(self.condition.ratio))
