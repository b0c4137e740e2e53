"""Step boundaries -> step records, with CUDA-event timing that never synchronizes.

Everything here runs on the training thread, inside the optimizer step post-hook or an
explicit ``agent.step()``. On CUDA a timing event is recorded on the current stream at every
boundary; a step's duration is read with ``elapsed_time`` only once ``query()`` says both of
its events have completed, so the host never waits for the GPU. Without CUDA (or before the
trainer initializes it) the host monotonic clock is used.
"""

from __future__ import annotations

import collections
import time
import weakref
from typing import Callable, Optional

from stepwatch.core import contract
from ._phase_times import split

__all__ = ["StepTracker"]


def _weak(obj):
    """A weak reference to ``obj``, or a strong one where it takes none (the tests' stand-ins)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj

_MAX_PENDING_EVENTS = 512


class _Pending:
    __slots__ = ("step", "event", "end_time_s", "host_duration_s", "extra", "points", "host_span")

    def __init__(self, step, event, end_time_s, host_duration_s, extra, points=None, host_span=None):
        self.step, self.event, self.end_time_s = step, event, end_time_s
        self.host_duration_s, self.extra = host_duration_s, extra
        self.points, self.host_span = points, host_span  # a sampled step's phase points


class StepTracker:
    """Counts steps and emits ``{"t": "step", ...}`` records through ``emit``.

    ``dataloader`` provides ``take() -> (wait_s, batches)``. ``cuda`` is the ``torch.cuda``
    module or None to force the host clock. ``phases``: a :class:`~._phase_times.PhaseTimer`
    whose sampled steps also emit ``{"t": "phase_times", ...}`` (before their step record).
    Clocks are injectable for tests.
    """

    def __init__(self, emit: Callable[[dict], None], dataloader, cuda=None,
                 samples_per_step: Optional[int] = None, tokens_per_step: Optional[int] = None,
                 memory_stats_interval_s: float = 1.0,
                 after_boundary: Optional[Callable[[int, float, bool], None]] = None,
                 clock: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time,
                 profiling: Callable[[], bool] = lambda: False, phases=None):
        self._emit, self._dataloader, self._cuda = emit, dataloader, cuda
        self._samples, self._tokens = samples_per_step, tokens_per_step
        self._mem_interval = memory_stats_interval_s
        self._after_boundary = after_boundary
        self._clock, self._wall = clock, wall
        self._profiling = profiling  # True while the agent's profiler window or capture is open
        self._profiled = False       # the step now running is (partly) profiled
        self._phase: Optional[str] = None     # a phase marked during the step now running
        self._open_phases: list[str] = []     # pause() blocks now open, innermost last
        self.steps = 0
        self.graph_captures = 0  # boundaries seen inside a CUDA-graph capture (not steps)
        self.explicit = False
        self._leader: Optional[int] = None
        self._leader_ref = None  # weakref of the leading optimizer (its parameters give the gradient points)
        self._cycle: list[int] = []   # the other optimizers stepped since the leader's last step, in order
        self._last_cycle: Optional[tuple] = None
        self._trailer: Optional[int] = None  # the optimizer whose step ends the iteration, once learnt
        self._last_host = clock()
        self._device: Optional[int] = None
        self._pending: collections.deque = collections.deque()
        self._prev_event = None
        self._free_events: list = []
        self._last_mem = float("-inf")
        self._device_total = 0
        self._max_batches_per_step = 1
        self._phases = phases
        self._optimizer = None  # the leading optimizer of the step that just ended

    # -- boundaries -------------------------------------------------------------------------
    def on_optimizer_step(self, optimizer) -> None:
        """Post-hook of every optimizer: one boundary per step whatever the optimizer count.

        The first optimizer seen leads. Others stepped after it in the same iteration are
        learnt: once two iterations in a row step the same others in the same order (each
        once), the last of them (the trailer) ends the step, so every optimizer's step falls in
        the optimizer phase and the next step starts clean; until then, or when the pattern is
        irregular (a GAN's discriminator stepped k times per generator step), the leader ends it.
        The iteration where the trailer is learnt ends at the trailer, not at the leader just
        before it (one step that much longer, instead of one of a single optimizer's step). A
        trailer that misses an iteration is forgotten (the leader ends steps again). If a
        non-leader fires twice with no leader call between, the leader is gone (re-created
        optimizer) and it takes over.
        """
        if self.explicit:
            return
        oid = id(optimizer)
        if self._leader is None:
            self._leader = oid
        if oid != self._leader:
            if oid not in self._cycle:  # (a few optimizers at most)
                self._cycle.append(oid)
                if oid == self._trailer:
                    self._end_step(self._leader_ref() if self._leader_ref is not None else None)
                return
            self._leader, self._trailer, self._last_cycle = oid, None, None  # the leader is gone
        cycle, self._cycle = tuple(self._cycle), []
        self._leader_ref = _weak(optimizer)
        if self._trailer is not None:
            if cycle and cycle[-1] == self._trailer:
                return  # the trailer ended the last step; this leader's step is in the next one
            self._trailer, self._last_cycle = None, None  # the trailer missed an iteration
            self._end_step(optimizer)
            return
        if cycle and cycle == self._last_cycle:
            self._trailer = cycle[-1]  # this iteration ends at the trailer, after this call
            return
        self._last_cycle = cycle
        self._end_step(optimizer)

    def _end_step(self, optimizer) -> None:
        self._optimizer = optimizer
        self.boundary()
        self._optimizer = None

    def on_explicit_step(self, samples: Optional[int], tokens: Optional[int]) -> None:
        """``agent.step()``: from the first call on, optimizer hooks no longer count steps."""
        self.explicit = True
        self.boundary(samples, tokens)

    def boundary(self, samples: Optional[int] = None, tokens: Optional[int] = None) -> None:
        if self._capturing():
            self._captured()
            return
        now, wall = self._clock(), self._wall()
        phases = self._phases
        points = self._phase_call(phases.close) if phases is not None else None
        start = self._last_host
        host_duration, self._last_host = now - start, now
        self.steps += 1
        wait, batches = self._dataloader.take()
        if batches > self._max_batches_per_step:  # gradient accumulation: several per step
            self._max_batches_per_step = batches
            self._dataloader.silent_after = max(self._dataloader.silent_after, 8 * batches)
        extra = {"dataloader_wait_s": wait, "profiled": self._profiled, "phase": self._phase}
        self._phase = self._open_phases[0] if self._open_phases else None  # still open: marks the next too
        samples = samples if samples is not None else self._samples
        tokens = tokens if tokens is not None else self._tokens
        if samples is not None:
            extra["samples"] = int(samples)
        if tokens is not None:
            extra["tokens"] = int(tokens)
        if self._device is None:
            self._find_device()
        if self._device is None:
            if points is not None:
                self._emit_host_phases(self.steps, wall, points, start, now)
            self._emit_step(self.steps, wall, host_duration, "host", extra)
        else:
            self._record_event(wall, host_duration, extra, points, (start, now))
            self.poll()
            if now - self._last_mem >= self._mem_interval:
                self._last_mem = now
                self._sample_memory(wall)
        before = self._profiling()
        if self._after_boundary is not None:
            self._after_boundary(self.steps, host_duration, self._device is not None)
        # The next step is profiled when a window is open during it, and also right after one
        # closed at this boundary: the trace export delays that step.
        self._profiled = before or self._profiling()
        if phases is not None and not self._profiled:
            if phases.leader is None and self._leader is not None:
                phases.leader = self._leader
            self._phase_call(phases.arm, self._optimizer, self.steps + 1)

    def _phase_call(self, fn, *args):
        """A phase timer call; one that raises turns the phase times off for the process (the
        steps go on, and the agent's hook is not counted as failing)."""
        try:
            return fn(*args)
        except Exception:
            self._phases = None
            return None

    # -- phase marks -----------------------------------------------------------------------
    def mark(self, kind: str) -> None:
        """The step now running contains a phase ``kind``. One kind per step: the first,
        except that any other kind replaces "log" (Hugging Face logs the evaluation's and the
        checkpoint's steps too; a step that evaluated is an "eval" step)."""
        if self._phase is None or (self._phase == "log" and kind != "log"):
            self._phase = kind

    def open_phase(self, kind: str) -> None:
        """A pause begins: this step and every step until :meth:`close_phase` are marked."""
        self._open_phases.append(kind)
        self.mark(kind)

    def close_phase(self) -> None:
        """The pause ended; the step it ends in stays marked (it paid for the pause)."""
        if self._open_phases:
            self._open_phases.pop()

    # -- CUDA -------------------------------------------------------------------------------
    def _capturing(self) -> bool:
        """True while the training thread's current stream is capturing a CUDA graph: a
        boundary then is an optimizer step being recorded into the graph, not one being run.
        Recording or querying an event then would invalidate the user's capture (CUDA forbids
        event queries while a global-mode capture is under way). Before CUDA is initialised one
        Python check (0.1 us on this 2-core machine); after it, one cudaStreamIsCapturing call a
        boundary (not timed on a GPU yet)."""
        cuda = self._cuda
        try:
            return cuda is not None and cuda.is_initialized() and bool(cuda.is_current_stream_capturing())
        except Exception:
            return False

    def _captured(self) -> None:
        """A boundary inside a CUDA-graph capture: no step, no event, no query. Said once: the
        optimizer hook does not fire when the graph is replayed."""
        self.graph_captures += 1
        if self.graph_captures == 1:
            self._emit(contract.event(self._wall(), "cuda_graph_capture", (
                "an optimizer step was captured into a CUDA graph; the graph's replays do not "
                "call the optimizer step hook, so stepwatch counts a step per replay only where "
                "the loop calls agent.step() after it")))

    def _find_device(self) -> None:
        cuda = self._cuda
        if cuda is None or not cuda.is_available() or not cuda.is_initialized():
            return
        self._device = cuda.current_device()
        if self._phases is not None:
            self._phases.use_cuda(cuda)
        props = cuda.get_device_properties(self._device)
        self._device_total = int(props.total_memory)
        self._emit(contract.gpu(self._device, str(getattr(props, "uuid", "") or ""), props.name,
                                self._device_total))

    def _record_event(self, wall: float, host_duration: float, extra: dict, points=None,
                      host_span=None) -> None:
        event = self._free_events.pop() if self._free_events else self._cuda.Event(enable_timing=True)
        event.record()
        if len(self._pending) >= _MAX_PENDING_EVENTS:  # GPU far behind: give up exact timing
            old = self._pending.popleft()
            self._emit_step(old.step, old.end_time_s, old.host_duration_s, "host", old.extra)
            self._retire(old.event)
        if points is not None and all(p is None or p[0] is not None for p in points):
            self._pending.append(_Pending(self.steps, event, wall, host_duration, extra, points, host_span))
        else:  # (points timed before CUDA was found have no events)
            self._pending.append(_Pending(self.steps, event, wall, host_duration, extra))

    def poll(self) -> None:
        """Emit every step whose end event has completed. Never waits."""
        while self._pending and self._pending[0].event.query():
            done = self._pending.popleft()
            if self._prev_event is None:
                self._emit_step(done.step, done.end_time_s, done.host_duration_s, "host", done.extra)
            else:
                seconds = self._prev_event.elapsed_time(done.event) / 1000.0
                if done.points is not None:
                    self._emit_cuda_phases(done)
                self._emit_step(done.step, done.end_time_s, seconds, "cuda_event", done.extra)
                self._retire(self._prev_event)
            self._prev_event = done.event

    def _emit_cuda_phases(self, done: _Pending) -> None:
        t0 = self._clock()
        events = [p[0] if p is not None else None for p in done.points]
        try:
            if all(e is None or e.query() for e in events):  # (an event on another stream may lag)
                times, seen = split(events, self._prev_event, done.event,
                                    lambda a, b: a.elapsed_time(b) / 1000.0)
                host, _ = split([p[1] if p is not None else None for p in done.points],
                                done.host_span[0], done.host_span[1], lambda a, b: b - a)
                self._emit(contract.phase_times(done.step, done.end_time_s, "cuda_event", times, host, seen))
        finally:
            if self._phases is not None:
                self._phases.release(events)
                self._phases.add_cost(self._clock() - t0)

    def _emit_host_phases(self, step: int, wall: float, points: list, start: float, end: float) -> None:
        t0 = self._clock()
        host, seen = split([p[1] if p is not None else None for p in points], start, end, lambda a, b: b - a)
        self._emit(contract.phase_times(step, wall, "host", host, host, seen))
        if self._phases is not None:
            self._phases.add_cost(self._clock() - t0)

    def _retire(self, event) -> None:
        if len(self._free_events) < 8:
            self._free_events.append(event)

    def _sample_memory(self, wall: float) -> None:
        self._emit(contract.alloc(wall, self._device, self._device_total,
                                  self._cuda.memory_stats(self._device)))

    def _emit_step(self, step: int, end_time_s: float, duration_s: float, clock: str,
                   extra: dict) -> None:
        self._emit(contract.step(step, end_time_s, duration_s, clock, **extra))
