"""Always-on phase times: where each sampled step's time went, with no profiler.

A step is cut at four points every training loop passes: the first batch a DataLoader hands
over, the start of backward (the first ``Tensor.backward`` call, or the first gradient
accumulated where backward is run otherwise, e.g. ``torch.autograd.backward``), the last
gradient accumulated, and the optimizer step's start (its end is the step boundary). Work at the
top of backward, before any parameter's gradient (the loss's and the head's backward, extra
work in a custom autograd function there), is backward's: with the first gradient as the
point it was counted in forward (GEMMs injected there on an H100 read "forward +7.0 ms/step"). On CUDA a timing event is recorded at each point (the
gradient points on the autograd thread) on the training thread's current stream as it was at
the boundary before (a forward run under another stream's context is timed on that boundary's
stream), and read late with the step's own end event, so nothing synchronizes; the host time of
each point is taken too. Without CUDA the host clock gives both.

The hooks exist only during a sampled step: the DataLoader callback, one global optimizer
pre-hook, ``torch.Tensor.backward`` wrapped (put back at the boundary after, unless something
else replaced it meanwhile) and two ``register_post_accumulate_grad_hook`` hooks (on the parameters whose
gradients come first and last, learnt once on a step that hooks them all) are installed at the
boundary before it and removed at the boundary after. A step is sampled while the time spent
here stays within ``budget`` of the wall time since attach, and once eight samples have
measured what one costs, only on the steps every rank of a job chooses at that rate: step ``n``
where the fractional part of ``n`` x the golden ratio is under the rate (0.9 x ``budget`` x the
mean step time since the first boundary over the mean cost of a sample). The chosen steps are
spread evenly, and a rank at a lower rate chooses a subset of another's: under data parallelism
the ranks run in lockstep, so a step sampled on one rank delays them all, and with each rank
choosing its own steps the job paid about the sum of the ranks' samples (2 x H200: 2,539 of
6,887 steps sampled on some rank at the 0.1% budget, +0.10% of one rank's median; 4 x H200, a
15 ms job: 820 of 3,000, +0.23..+0.28%; choosing the same, 2 x H200: 392 of 2,079, 360 of them
on both ranks; bench/results/phase_cost_ddp.md). The step numbers are the tracker's, counted
from attach (ranks that attach at the same point agree). A boundary the choice declines costs
0.43 us against 0.16 us for one the budget check declines (bench/phase_arm_cost.py, the 2-core
development machine): +0.27 us, 0.002% of a 15 ms step.

Degrades, never fails: a point not seen in a step (no DataLoader, CUDA-graph replay, no
gradient) leaves its phase at 0 and its time in the next phase seen, and the record says which
points were seen; a point reached while the stream is capturing a CUDA graph drops the step's
sampling (nothing is recorded into the user's graph); with gradient accumulation the
forward phase is the first micro-batch's and backward spans the rest; with several optimizers
stepped once each per iteration the optimizer phase runs from the leading one's step to the end
of the last one's (which ends the step once learnt, agent/_steps.py); where the pattern is
irregular the leader ends the step and the others' steps fall in the next step's data phase.
Hook bodies never raise.
"""

from __future__ import annotations

import time
import weakref
from typing import Callable, Optional

__all__ = ["PhaseTimer", "PHASES"]

PHASES = ("data", "forward", "backward", "sync", "optimizer")
_BATCH, _FIRST, _LAST, _OPT = range(4)
_LEARN_TRIES = 3  # sampled steps that may try to learn the gradient order before giving up
_RATE_AFTER = 8    # samples taken by the budget alone, to measure what one costs
_RATE_SHARE = 0.9  # of the budget's rate: the budget itself stays a bound the chosen steps rarely meet
_GOLDEN = 2654435769  # 2**32 / the golden ratio: step n's fractional part of n x 0.618..., in 32 bits


class PhaseTimer:
    """Arms sampled steps and hands their points to the step tracker.

    ``cuda``: the ``torch.cuda`` module when steps are timed with CUDA events, else None.
    ``dataloader``: the :class:`~._dataloader.DataLoaderTimer` (its ``notify`` slot).
    Training thread, except the gradient hooks (autograd thread).
    """

    def __init__(self, dataloader, budget: float, clock: Callable[[], float] = time.perf_counter):
        self._dataloader = dataloader
        self._budget = budget
        self._clock = clock
        self._start = clock()
        self.cost_s = 0.0
        self._quickest = float("inf")  # the quickest point so far (seconds)
        self.sampled = 0
        self._cuda = None
        self._events: list = []
        self._points: Optional[list] = None  # [(event, host time) or None] x 4 while armed
        self._stream = None  # the training thread's current CUDA stream when the step was armed
        self._handles: list = []
        self._optimizer = None   # weakref of the optimizer whose parameters are hooked
        self._pair: Optional[tuple] = None  # (weakref first param, weakref last param)
        self._learning: Optional[list] = None
        self._backward: Optional[tuple] = None  # (torch.Tensor.backward as it was, ours) while armed
        self._learn_tries = 0
        self._boundaries = 0  # arm() calls: boundaries not inside a profiler window
        self._first: Optional[float] = None  # the first one's time
        self.leader: Optional[int] = None

    @property
    def enabled(self) -> bool:
        return self._budget > 0

    def use_cuda(self, cuda) -> None:
        self._cuda = cuda

    def cost_ratio(self) -> float:
        return self.cost_s / max(1e-9, self._clock() - self._start)

    # -- the boundary: close the step that ended, maybe arm the next -----------------------
    def close(self) -> Optional[list]:
        """Remove the hooks; the points of the step that just ended (None when it was not
        sampled). A learning step returns None."""
        if self._points is None and not self._handles:
            return None
        t0 = self._clock()
        points, self._points = self._points, None
        self._dataloader.notify = None
        for h in self._handles:
            h.remove()
        self._handles = []
        self._unwrap_backward()
        learning, self._learning = self._learning, None
        if learning is not None:
            self._learn(learning)
            points = None
        self.cost_s += self._clock() - t0
        return points

    def arm(self, optimizer, step: Optional[int] = None) -> None:
        """At a boundary: sample the next step when the budget allows and (``step``, the next
        step's number, given) it is one of the chosen steps. ``optimizer``: the leading optimizer
        if known (its parameters give the gradient points)."""
        if self._budget <= 0:
            return
        t0 = self._clock()
        self._boundaries += 1
        if self._first is None:
            self._first = t0
        if self.cost_s > self._budget * (t0 - self._start):
            return
        if step is not None and self.sampled >= _RATE_AFTER and not self.chosen(step, t0):
            return
        self._points = [None, None, None, None]
        self._dataloader.notify = self._on_batch
        try:
            # the stream looked up once per sampled step (8 us on an H100 host, of a record's 11 us)
            self._stream = self._cuda.current_stream() if self._cuda is not None else None
            from torch.optim.optimizer import register_optimizer_step_pre_hook
            self._handles.append(register_optimizer_step_pre_hook(self._on_optimizer))
            self._hook_gradients(optimizer)
            if self._points is not None:
                self._wrap_backward()
        except Exception:
            pass
        self.sampled += 1
        self.cost_s += self._clock() - t0

    def chosen(self, step: int, now: float) -> bool:
        """Whether ``step`` is one to sample at the rate the budget allows (see the module)."""
        if self.cost_s <= 0 or self.sampled <= 0 or self._boundaries < 2:
            return True
        # the mean step from the first boundary (the time before it, building the model, is no step)
        step_s = (now - self._first) / (self._boundaries - 1)
        rate = _RATE_SHARE * self._budget * step_s / (self.cost_s / self.sampled)
        return (step * _GOLDEN) & 0xFFFFFFFF < rate * 4294967296.0

    def add_cost(self, seconds: float) -> None:
        self.cost_s += seconds

    def release(self, events) -> None:
        """Events read by the tracker, for reuse."""
        if self._cuda is not None and len(self._events) < 16:
            self._events.extend(e for e in events if e is not None)

    # -- the points --------------------------------------------------------------------------
    def _mark(self, index: int, again: bool = False) -> None:
        points = self._points
        if points is None or (points[index] is not None and not again):
            return
        t0 = self._clock()
        event = None
        if self._cuda is not None:
            if self._cuda.is_current_stream_capturing():
                # inside a CUDA-graph capture: a record would go into the user's graph (and a
                # later query break the capture); this step is not sampled
                self._points = None
                return
            old = points[index]
            event = old[0] if old is not None else (self._events.pop() if self._events else
                                                    self._cuda.Event(enable_timing=True))
            event.record(self._stream)
        points[index] = (event, t0)
        took = self._clock() - t0
        # A record can block while the launch queue is full: the GPU is far behind then and the
        # host's next launch would have waited as long, so a point is charged at most twice the
        # quickest one seen (on an H100 the sum with blocking read 330-470 us per sampled step).
        self._quickest = min(self._quickest, took)
        self.cost_s += min(took, 2 * self._quickest)

    def _on_batch(self) -> None:
        try:
            self._mark(_BATCH)
        except Exception:
            pass

    def _on_optimizer(self, optimizer, args, kwargs) -> None:
        try:
            if self.leader is None or id(optimizer) == self.leader:
                self._mark(_OPT)
            if self._optimizer is None:
                self._optimizer = weakref.ref(optimizer)
        except Exception:
            pass

    def _hook_gradients(self, optimizer) -> None:
        if optimizer is not None and self._optimizer is None:
            self._optimizer = weakref.ref(optimizer)
        pair = self._pair
        if pair is not None:
            first, last = pair[0](), pair[1]()
            if first is None or last is None:  # parameters gone (model rebuilt): learn again
                self._pair, self._learn_tries = None, 0
            else:
                if first is last:
                    self._handles.append(first.register_post_accumulate_grad_hook(self._on_only))
                else:
                    self._handles.append(first.register_post_accumulate_grad_hook(self._on_first))
                    self._handles.append(last.register_post_accumulate_grad_hook(self._on_last))
                return
        opt = self._optimizer() if self._optimizer is not None else None
        if opt is None or self._learn_tries >= _LEARN_TRIES:
            return
        self._learn_tries += 1
        seen: list = []
        ids: set = set()
        for group in opt.param_groups:
            for p in group["params"]:
                if id(p) in ids or not getattr(p, "requires_grad", False):
                    continue
                ids.add(id(p))
                self._handles.append(p.register_post_accumulate_grad_hook(_Order(seen)))
        self._learning = seen
        self._points = None  # a learning step is not reported (its hooks cost more)
        self._dataloader.notify = None

    def _wrap_backward(self) -> None:
        import torch
        original = torch.Tensor.backward
        mark = self._on_backward

        def backward(tensor, *args, **kwargs):
            mark()
            return original(tensor, *args, **kwargs)

        backward.__wrapped__ = original
        torch.Tensor.backward = backward
        self._backward = (original, backward)

    def _unwrap_backward(self) -> None:
        if self._backward is not None:
            import torch
            original, ours = self._backward
            self._backward = None
            if torch.Tensor.backward is ours:
                torch.Tensor.backward = original

    def _on_backward(self) -> None:
        try:
            self._mark(_FIRST)
        except Exception:
            pass

    def _learn(self, seen: list) -> None:
        if seen:
            self._pair = (weakref.ref(seen[0]), weakref.ref(seen[-1]))

    def _on_first(self, param) -> None:
        try:
            self._mark(_FIRST)
        except Exception:
            pass

    def _on_last(self, param) -> None:
        try:
            self._mark(_LAST, again=True)
        except Exception:
            pass

    def _on_only(self, param) -> None:
        try:
            self._mark(_FIRST)
            self._mark(_LAST, again=True)
        except Exception:
            pass


class _Order:
    """The learning hook of one parameter: appends it to ``seen`` the first time it fires."""

    __slots__ = ("seen", "done")

    def __init__(self, seen: list):
        self.seen, self.done = seen, False

    def __call__(self, param) -> None:
        if not self.done:
            self.done = True
            self.seen.append(param)


def split(points: list, start, end, elapsed: Callable) -> tuple:
    """``(five phase times, points bitmask)`` between ``start``, the points present and ``end``
    (``elapsed(a, b)`` in seconds); a missing point's phase is 0, its time in the next phase."""
    out = [0.0] * 5
    prev, seen = start, 0
    for i, point in enumerate(list(points) + [end]):
        if point is None:
            continue
        if i < 4:
            seen |= 1 << i
        out[i] = max(0.0, elapsed(prev, point))
        prev = point
    return out, seen
