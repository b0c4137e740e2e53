"""Profiler windows on the training thread, spaced to stay under an overhead budget.

When windows run is the ``windows`` setting: ``on_demand`` (the default) opens one only when
asked (the collector's ``window_now`` after a slowdown alert; captures come through
:meth:`request_capture` in every mode), ``scheduled`` also on the schedule below, ``off`` never
(captures still run). On demand is the default because any profiler session, CPU-only
included, leaves the process slower for the rest of its life: on 1-GPU H100 jobs of 46-49 ms
steps, the warm-up session alone +0.94% (SE 0.45%), scheduled windows +1.22..1.35%, CPU-only
windows +1.30%, no window +0.24% (bench/results/agent_ab_h100w.md, agent_ab_h100l.md). On the
schedule the first session waits until the job has run the after-effect check's "before" span,
so that check judges it against the level no profiler had touched; a lasting after-effect it
finds counts in ``overhead_ratio`` from the session on, for the rest of the process. (The check
sees 2% and more, or the job's own wobble: not the ~1% measured on H100.)

On the schedule, at a step boundary ``s`` with ``s % period == 0`` a new ``torch.profiler.profile`` starts
(schedule: ``warmup`` then ``active`` steps); each later boundary calls ``prof.step()``; when
the active steps end the trace is exported natively (no ``key_averages()``, no parsing here),
the profiler is stopped and dropped, ``gc.collect(1)`` runs, and the sidecar is told where the
file is (with ``window_export`` off, an A/B arm, a window's trace is neither written nor sent;
the window is still timed, costed and followed by the after-effect check). ``period`` is a power of two computed from the interval, the measured step time and
the measured window cost, so every rank of a data-parallel job lands on the same steps.

Every method runs on the training thread; the sidecar's replies arrive through
:meth:`on_message` (also on the training thread).
"""

from __future__ import annotations

import collections
import gc
import contextlib
import logging
import os
import sys
import time
import warnings
from typing import Callable, Optional

from stepwatch.core import contract
from ._aftereffect import AftereffectWatch

__all__ = ["WindowScheduler"]

_MIN_BASELINE_STEPS = 20  # first-step compilation and warm-up pass before the first window
# A kind of session that left the job slower is tried again after this long (a lasting
# after-effect is the profiler's, CUPTI's or the driver's state, which an upgrade may change).
_AFTEREFFECT_RETRY_S = 6 * 3600.0
_log = logging.getLogger("stepwatch.agent")


@contextlib.contextmanager
def _quiet():
    """torch (>= 2.6) warns "Profiler clears events at the end of each cycle" on the trainer's
    stderr when a window's schedule moves on; one cycle per window makes it moot. (acc_events=True
    would silence it too, but was measured on an H200 to more than double a window's cost.)"""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)
        yield


def _pow2_at_least(value: float) -> int:
    n = 1
    while n < value:
        n *= 2
    return n


class _Window:
    __slots__ = ("kind", "wid", "prof", "start_step", "start_clock", "start_wall", "path",
                 "export_s", "request_id", "steps", "first_step", "done", "activities")

    def __init__(self, **kw):
        for key in self.__slots__:
            setattr(self, key, kw.get(key))


class WindowScheduler:
    """Opens, advances and closes windows; measures cost; keeps ``overhead_ratio`` under budget.

    ``emit`` sends records to the sidecar. ``torch`` is the torch module. ``cuda`` is True
    when the trainer runs CUDA work (checked by the caller). Clocks are injectable.
    """

    def __init__(self, emit: Callable[[dict], None], torch, settings, workdir: str,
                 clock: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time):
        self._emit, self._torch, self._workdir = emit, torch, workdir
        self._clock, self._wall = clock, wall
        self.enabled = settings.windows != "off"        # windows at all (asked-for ones included)
        self.scheduled = settings.windows == "scheduled"  # also on the schedule
        self._interval_s = settings.window_interval_s
        self._every = settings.window_every_steps
        self._warmup, self._active = settings.window_warmup_steps, settings.window_active_steps
        self._activities = settings.window_activities
        self._export = settings.window_export
        self._budget = settings.overhead_budget
        self._capture_budget = settings.capture_budget
        self._backoff_s = settings.window_backoff_s
        self._first_after_s = settings.window_first_after_s
        self._attach_clock = clock()
        self._baseline: collections.deque = collections.deque(maxlen=64)
        self._window: Optional[_Window] = None
        self._captures: collections.deque = collections.deque(maxlen=8)
        self._cost_ewma: Optional[float] = None
        self.total_cost_s = 0.0   # windows after the warm-up one, and captures
        self.warmup_cost_s = 0.0  # the one-time warm-up window (CUPTI and profiler start-up)
        self.windows = 0
        self._sessions = 0  # profiler sessions so far, windows and captures
        self.skips: dict[str, int] = {}
        self._next_id = 1
        self._backoff_until = float("-inf")
        self._cuda_windows: set[int] = set()
        self._compile_seen = (0, 0)
        self._early: Optional[str] = None  # a window asked for ahead of the schedule (reason)
        # After-effect back-off: each level drops a kind of session (CUDA activity, then
        # windows and captures altogether) that left the job slower.
        self._watch = AftereffectWatch(span_s=settings.aftereffect_span_s,
                                       settle_s=settings.aftereffect_span_s / 5,
                                       threshold=settings.aftereffect_threshold)
        self._levels = self._backoff_levels(self._activities)
        self._level = 0
        self._retry_at = float("inf")
        self.aftereffects = 0  # checks that found a lasting after-effect
        # The largest lasting after-effect a check found, as the share of each step's wall time
        # it costs (1 - before/after), and the clock it began at: counted in overhead_ratio for
        # the rest of the process (turning windows off does not undo what a session left).
        self._lasting, self._lasting_since = 0.0, 0.0

    # -- public, training thread ------------------------------------------------------------
    def on_boundary(self, step: int, host_duration_s: float, cuda: bool) -> None:
        """Called after every step boundary ``step`` (1-based) with its host duration."""
        if self._window is not None:
            self._advance(step)
            return
        self._baseline.append(host_duration_s)
        now = self._clock()
        done = self._watch.step(now)
        if done is not None:
            self._aftereffect(*done, now)
        if now >= self._retry_at:
            self._retry(now)
        if self._captures:
            self._start_capture(step, cuda)
        elif self.enabled and self._levels[self._level] != "off":
            early = self._early_due(step)
            if early or (self.scheduled and self._due(step)):
                self._start_window(step, cuda, judged=not early)

    def request_capture(self, request_id: str, steps: int) -> None:
        self._captures.append((str(request_id), max(1, int(steps))))

    def on_message(self, msg: dict) -> None:
        """A reply from the sidecar: ``window_result`` (GPU event count) or ``capture``."""
        if msg.get("t") == contract.CAPTURE:
            self.request_capture(msg.get("request_id", ""), msg.get("steps", 1))
        elif msg.get("t") == contract.WINDOW_NOW:
            self._early = str(msg.get("reason", ""))[:100] or "requested"
        elif msg.get("t") == contract.WINDOW_RESULT:
            wid = msg.get("window_id")
            if wid in self._cuda_windows and msg.get("gpu_event_count", 1) == 0:
                # Another CUPTI subscriber (Nsight, DCGM profiling) took the GPU events.
                self._backoff_until = self._clock() + self._backoff_s
            self._cuda_windows.discard(wid)

    @property
    def aftereffect_ratio(self) -> float:
        """Wall time per step in the two spans after the last checked session over the time
        before it (0 before any check)."""
        return self._watch.ratio or 0.0

    def profiling(self) -> bool:
        """True while a window or capture is open (its steps carry the profiler's cost)."""
        return self._window is not None

    @property
    def lasting_cost_s(self) -> float:
        """Seconds a lasting after-effect has cost since it began (0 when no check found one)."""
        return self._lasting * max(0.0, self._clock() - self._lasting_since) if self._lasting else 0.0

    @property
    def overhead_ratio(self) -> float:
        """Profiling's share of the wall time since attach: the windows' and captures' own cost,
        plus, once a check found that a session left the job slower, that share of every step
        since (not only the time inside windows)."""
        elapsed = self._clock() - self._attach_clock
        return (self.total_cost_s + self.lasting_cost_s) / elapsed if elapsed > 0 else 0.0

    def period(self) -> int:
        """Steps between window starts: interval and budget both only ever stretch it."""
        step_s = self._step_s()
        by_interval = self._every or _pow2_at_least(self._interval_s / step_s)
        by_budget = 1
        if self._cost_ewma:
            by_budget = _pow2_at_least(self._cost_ewma / (self._budget * step_s))
        return max(by_interval, by_budget, self._shortest_period())

    def _shortest_period(self) -> int:
        return _pow2_at_least(2 * (self._warmup + self._active + 1))

    # -- scheduling ---------------------------------------------------------------------------
    def _step_s(self) -> float:
        """Wall seconds per step: the mean of the recent host step durations without their top
        and bottom tenth. Not the median: a GPU job's host steps are bimodal when the host
        runs ahead of the device and then blocks on a full launch queue, and the median of
        such steps is well below the wall time per step; the trimming keeps a pause out."""
        if not self._baseline:
            return 1e-6
        ordered = sorted(self._baseline)
        cut = len(ordered) // 10
        kept = ordered[cut:len(ordered) - cut] or ordered
        return max(sum(kept) / len(kept), 1e-6)

    def _due(self, step: int) -> bool:
        if len(self._baseline) < min(_MIN_BASELINE_STEPS, self._baseline.maxlen):
            return False
        # The warm-up window (discarded: CUPTI and profiler start-up) comes at the shortest
        # period (the same step on every rank) once the job has run window_first_after_s (60 s,
        # the after-effect check's "before" span), so the first session is judged against the
        # job's level before any profiler ran: a level it leaves for the rest of the process
        # (bench/results/agent_ab_h100w.md) is otherwise never seen. A job shorter than that
        # and a window period gets no scheduled window (on-demand ones are not held back).
        if not self._sessions and self._clock() - self._attach_clock < self._first_after_s:
            return False
        if step % (self.period() if self._sessions else self._shortest_period()):
            return False
        if self._over_budget_after():
            # Deferred, not an event: the next due step tries again (counted).
            self.skips["over_budget"] = self.skips.get("over_budget", 0) + 1
            return False
        reason = self._skip_reason()
        if reason:
            self.skips[reason] = self.skips.get(reason, 0) + 1
            self._emit(contract.event(self._wall(), "window_skipped",
                                      f"profiler window at step {step} skipped: {reason}"))
            return False
        return True

    def _early_due(self, step: int) -> bool:
        """A window asked for by the collector: at this boundary, if the agent is under its
        overhead budget and nothing else forbids a window; either way the request is used up."""
        if self._early is None or len(self._baseline) < min(_MIN_BASELINE_STEPS, self._baseline.maxlen):
            return False
        reason, self._early = self._early, None
        skip = self._skip_reason() or ("over_budget" if self.overhead_ratio >= self._budget
                                       or self._over_budget_after() else "")
        if skip:
            self.skips["early_" + skip] = self.skips.get("early_" + skip, 0) + 1
            self._emit(contract.event(self._wall(), "window_skipped",
                                      f"early window asked for ({reason}) at step {step} skipped: {skip}"))
            return False
        return True

    def _over_budget_after(self) -> bool:
        """Would the reported ratio end above the budget if a window of the usual cost ran now?
        (The period keeps the long-run ratio under budget; this keeps the figure itself there
        early in a job, when the time since attach is still short.)"""
        if self._sessions == 0:
            return False  # the warm-up session's cost (a window or a capture) is kept apart
        # Before any window was measured: as if the profiler doubled the window's steps.
        cost = self._cost_ewma or (self._warmup + self._active) * self._step_s()
        elapsed = self._clock() - self._attach_clock
        return (self.total_cost_s + self.lasting_cost_s + cost) / max(elapsed + cost, 1e-9) > self._budget

    def _skip_reason(self) -> str:
        torch = self._torch
        # (no CUDA-graph check: a boundary inside a capture never reaches on_boundary, the step
        # tracker stops it, agent/_steps.py)
        if torch.autograd._profiler_enabled():
            return "user_profiler"
        if self._clock() < self._backoff_until:
            return "no_gpu_events_backoff"
        return ""

    def _activity_list(self, cuda: bool):
        acts = self._torch.profiler.ProfilerActivity
        level = self._levels[self._level]
        names = [a for a in level.split(",") if a != "cuda" or cuda] or ["cpu"]
        return names, [acts.CPU if n == "cpu" else acts.CUDA for n in names]

    # -- window life cycle ----------------------------------------------------------------------
    def _open(self, kind: str, step: int, cuda: bool, warmup: int, active: int,
              request_id: str = "", judged: bool = True) -> None:
        """Open a session. ``judged``: whether its after-effect is checked; a session the
        collector asked for (a slowdown alert's window, a capture) is not: the slowdown that
        brought it began before it, and the check's "before" would hold the job's own change
        (an H200 job's empty_cache slowdown 11 s before an alert's window turned CUDA windows
        off for 6 h as that window's after-effect)."""
        torch = self._torch
        names, activities = self._activity_list(cuda)
        wid = self._next_id
        self._next_id += 1
        path = os.path.join(self._workdir, f"{kind}-{wid}.json")
        window = _Window(kind=kind, wid=wid, start_step=step, start_clock=self._clock(),
                         start_wall=self._wall(), path=path, export_s=0.0, request_id=request_id,
                         steps=warmup + active, first_step=step + warmup + 1, done=False,
                         activities=",".join(names))

        def ready(prof):
            t0 = self._clock()
            if kind == "trace" or self._export:
                prof.export_chrome_trace(path)  # native (Kineto) export
            window.export_s, window.done = self._clock() - t0, True

        window.prof = torch.profiler.profile(
            activities=activities, on_trace_ready=ready,
            schedule=torch.profiler.schedule(wait=0, warmup=warmup, active=active, repeat=1))
        self._window = window
        self._watch.opened(window.start_clock, judged)
        with _quiet():
            window.prof.start()
        if cuda and "cuda" in names:
            self._cuda_windows.add(wid)

    def _start_window(self, step: int, cuda: bool, judged: bool = True) -> None:
        self._open("window", step, cuda, self._warmup, self._active, judged=judged)

    def _start_capture(self, step: int, cuda: bool) -> None:
        request_id, steps = self._captures.popleft()
        if self._levels[self._level] == "off":
            self._emit(contract.trace(request_id, "", step, step, (
                "refused: a profiler session left this job slower "
                f"({self.aftereffect_ratio - 1:+.1%} per step); profiling is off in this process")))
            return
        if self._sessions and self.overhead_ratio > self._capture_budget:
            # Captures come on request (a person, an alert); they must not be able to make
            # profiling the job's main cost: refused, and the reply says why.
            self._emit(contract.trace(request_id, "", step, step, (
                f"refused: profiling has cost {self.overhead_ratio:.1%} of the wall time since attach, "
                f"above capture_budget {self._capture_budget:.1%}")))
            return
        self._open("trace", step, cuda, 1, steps, request_id, judged=False)

    def _advance(self, step: int) -> None:
        window = self._window
        with _quiet():
            window.prof.step()
        if not window.done and step - window.start_step < window.steps:
            return
        self._window = None
        with _quiet():
            window.prof.stop()
        window.prof = None
        # Repeated profiler contexts leave cyclic garbage behind. Collecting the young
        # generations frees it: measured on CPU over 250 windows, RSS grew 2.2 MiB without,
        # 0.02 MiB with gc.collect(1) (0.1 ms), 0.0 MiB with a full gc.collect() (147 ms).
        gc.collect(1)
        cost = self._clock() - window.start_clock - window.steps * self._step_s()
        cost = max(cost, window.export_s)
        if self._sessions == 0:
            # The first profiler session (a window, or a capture asked for before any window)
            # pays the profiler's one-time start-up: kept apart, so neither the reported
            # overhead nor the spacing of later windows carries it.
            self.warmup_cost_s += cost
        else:
            self._account(cost, spacing=window.kind == "window")
        self._sessions += 1
        self._report(window, step, cost)
        self._watch.closed(window.activities, self._clock())

    @staticmethod
    def _backoff_levels(activities: str) -> list:
        """The kinds of session stepped down through: as set, without CUDA activity, off."""
        levels = [activities]
        names = [a for a in activities.split(",") if a != "cuda"]
        if names and len(names) < len(activities.split(",")):
            levels.append(",".join(names))
        return levels + ["off"]

    def _aftereffect(self, label: str, ratio: float, lasting: bool, now: float) -> None:
        """A finished after-effect check of a session with activities ``label``."""
        if not lasting:
            return
        self.aftereffects += 1
        # From the session's close on (the two spans after it and the settling before them),
        # that share of every step is profiling's cost in the reported overhead ratio.
        share = 1 - 1 / ratio
        if share > self._lasting:
            self._lasting = share
            self._lasting_since = now - (2 * self._watch.span_s + self._watch.settle_s)
        if self._levels[self._level] == "off":
            return  # (a capture's check while profiling is off cannot happen; kept safe)
        self._level += 1
        # a level that would run the same activities as the session that left the job slower
        # (cpu,cuda on a job without CUDA runs cpu) is no back-off: skipped
        ran = set(label.split(","))
        while self._levels[self._level] != "off" and set(self._levels[self._level].split(",")) >= ran:
            self._level += 1
        self._retry_at = now + _AFTEREFFECT_RETRY_S
        nxt = self._levels[self._level]
        what = "profiling is off in this process" if nxt == "off" else f"windows now take {nxt} activity only"
        message = (f"a profiler session ({label}) left the job {ratio - 1:+.1%} slower per step for "
                   f"{2 * self._watch.span_s:.0f} s; "
                   f"{what}; retried in {_AFTEREFFECT_RETRY_S / 3600:.0f} h")
        _log.warning("stepwatch: %s", message)
        self._emit(contract.event(self._wall(), "window_aftereffect", message))

    def _retry(self, now: float) -> None:
        """Step back up one level, once per _AFTEREFFECT_RETRY_S, under the same check."""
        self._level = max(0, self._level - 1)
        self._retry_at = now + _AFTEREFFECT_RETRY_S if self._level else float("inf")
        self._emit(contract.event(self._wall(), "window_aftereffect_retry",
                                  f"profiler sessions with {self._levels[self._level]} activity tried again"))

    def _account(self, cost: float, spacing: bool = True) -> None:
        """Add to the reported overhead; scheduled windows (not captures, which come on
        request and trace many steps) also set the expected cost that spaces windows."""
        self.total_cost_s += cost
        if spacing:
            self._cost_ewma = cost if self._cost_ewma is None else 0.7 * self._cost_ewma + 0.3 * cost

    def _report(self, window: _Window, step: int, cost: float) -> None:
        last = window.start_step + window.steps
        if window.kind == "trace":
            error = "" if window.done and os.path.exists(window.path) else "profiler produced no trace"
            self._emit(contract.trace(window.request_id, window.path, window.first_step, last,
                                      error))
            return
        self.windows += 1
        if not self._export:
            return  # nothing written, nothing to summarise (window_export off: an A/B arm)
        self._emit(contract.window(window.wid, window.path, window.first_step, last,
                                   window.start_wall, window.activities, cost, window.export_s,
                                   # on the schedule the first window is the warm-up (CUPTI and
                                   # profiler start-up); on demand it is the one that was asked for
                                   discard=self.windows == 1 and self.scheduled,
                                   **self._compile_health()))

    def _compile_health(self) -> dict:
        """torch.compile graph breaks and newly compiled graphs since the previous window.

        Two dict reads of ``torch._dynamo.utils.counters``, only when the trainer already
        imported torch._dynamo (never imported here). A graph compiled after the first
        window is a recompilation (new shapes, guards failing).
        """
        dynamo = sys.modules.get("torch._dynamo.utils")
        if dynamo is None or not hasattr(dynamo, "counters"):
            return {}
        counters = dynamo.counters
        now = (sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"])
        before, self._compile_seen = self._compile_seen, now
        return {"graph_breaks": now[0] - before[0], "recompiles": now[1] - before[1]}

    def close(self) -> None:
        """Stop a window in progress without exporting (detach / exit)."""
        window, self._window = self._window, None
        if window is not None and window.prof is not None:
            with _quiet():
                window.prof.stop()
