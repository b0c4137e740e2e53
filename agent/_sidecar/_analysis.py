"""Window analysis: a torch.profiler / Kineto Chrome trace -> the trace-derived WindowSummary.

Definitions (all device times are seconds of the GPU timeline, unions of intervals, so work
on two streams at once counts once):

* **span**: the profiled steps on the device. With CPU activity and ``ProfilerStep#N``
  ranges, the GPU projection of those steps: first start .. last end of the GPU events
  launched inside a ProfilerStep. Otherwise first GPU event start .. last GPU event end.
  GPU events are clipped to the span.
* **busy / idle**: union of kernels, memcpy and memset over the span; idle = 1 - busy.
* **compute / communication / memcpy**: union of non-NCCL kernels, of NCCL kernels (name
  contains "nccl", case-insensitive), of memcpy+memset. **overlap**: the share of
  communication time during which a compute kernel also runs.
* **top kernels**: by summed duration (kernels only); **top ops**: by self device time, the
  duration of GPU events (kernels, memcpy, memset) whose launch (matched by correlation id)
  lies directly under the op, i.e. the op is the innermost ``cpu_op``/``record_function``
  range enclosing the launch on its thread. Needs CPU activity; else empty.
* **breakdown** (per average step, step_time = span / steps): forward, backward and
  optimizer are the unions of non-communication GPU events by the phase of their launch
  (see :func:`._trace_model.own_phase`; launches on the autograd thread are backward,
  other launches inside a ProfilerStep forward); communication is NCCL time not overlapped
  by any non-communication GPU work. GPU idle time while the host was inside an explicit
  optimizer, backward or forward range (explicit, or the implicit forward operators of a plain
  model) is charged to that phase (the host held the GPU up
  there: host work in Optimizer.step, a launch-bound backward); other = step_time - the rest
  (idle during data loading or syncs, and unattributed work), clamped at 0, so the parts add
  up. ``forward_gpu_s`` etc. are the same unions before any idle time is charged: the GPU
  work launched in each phase. CUDA-only traces (no CPU ranges) leave the phases 0: other is
  step_time - communication.
* **CPU-only traces** (no GPU events): gpu_event_count 0, busy and idle ratios 0 (there is
  no device timeline), span and step_time from the ProfilerStep ranges, top_ops by **CPU**
  self time of ``cpu_op`` ranges, phases from the host time of the phase ranges (a model
  without a "forward" annotation: the operators directly under a ProfilerStep before its first
  backward range, see :func:`._trace_model._implicit_forward`). The CPU is
  the device there, so **compute** is the host time in operators inside the steps (union of
  ``cpu_op`` ranges in a step or phase, communication ops left out) and **communication** the
  host time in collectives (``gloo:``/``nccl:`` work ranges on the backend's threads,
  ``c10d::`` ops), both clipped to the span: a rank that waits for a slower peer shows it as
  long collectives and short compute, as on a GPU.

Cost: one pass over the events, one sort per CPU thread and per interval set.
"""

from __future__ import annotations

import bisect
import os
import time
from typing import Dict, Iterable, List, Tuple, Union

from stepwatch.proto.stepwatch.v1 import agent_pb2

from . import _intervals as iv
from ._trace_model import (BACKWARD, COMM, COMPUTE, FORWARD, MEMORY, NONE, OPTIMIZER, STEP,
                           GpuEvent, TraceError, TraceModel, build_model, load_events)

__all__ = ["TraceError", "summarize"]

_US = 1e-6
MAX_NAME_CHARS = 256
_FIELD = {FORWARD: "forward_s", BACKWARD: "backward_s", OPTIMIZER: "optimizer_s"}
_GPU_FIELD = {FORWARD: "forward_gpu_s", BACKWARD: "backward_gpu_s", OPTIMIZER: "optimizer_gpu_s"}


def summarize(source: Union[str, os.PathLike, dict, bytes], top_k: int = 10,
              short_kernel_s: float = 10e-6, steps: int = 0) -> agent_pb2.WindowSummary:
    """Analyse one window's trace (a path to plain or gzipped JSON, bytes, or the decoded
    dict) and return a WindowSummary with the trace-derived fields set: span_s, busy/idle
    ratios, compute/communication/memcpy seconds, overlap_ratio, kernel_count,
    short_kernel_ratio, top_kernels, top_ops, breakdown, gpu_event_count and analysis_s
    (wall seconds spent here, parsing included). See the module docstring for definitions.

    ``steps`` is the number of profiled steps, used only when the trace has no
    ``ProfilerStep#N`` ranges (CUDA-only traces); 0 means 1. Raises :class:`TraceError` (a
    ValueError) for input that is not a Chrome trace and OSError when the file is unreadable.
    Pure apart from reading the file; safe on any thread.
    """
    began = time.perf_counter()
    model = build_model(load_events(source))
    n_steps = len(model.steps) or max(int(steps), 1)
    out = agent_pb2.WindowSummary()
    if model.gpu:
        _device_summary(out, model, n_steps, top_k, short_kernel_s)
    else:
        _cpu_summary(out, model, n_steps, top_k)
    out.analysis_s = time.perf_counter() - began
    return out


def _device_summary(out: agent_pb2.WindowSummary, model: TraceModel, n_steps: int,
                    top_k: int, short_kernel_s: float) -> None:
    lo, hi = _span(model)
    events = [e for e in model.gpu if e.end > lo and e.start < hi]
    out.span_s = (hi - lo) * _US
    out.gpu_event_count = len(events)
    unions = {kind: iv.clip(iv.union((e.start, e.end) for e in events if e.kind == kind), lo, hi)
              for kind in (COMPUTE, COMM, MEMORY)}
    busy = iv.union(unions[COMPUTE] + unions[COMM] + unions[MEMORY])
    out.gpu_busy_ratio = min(iv.length(busy) / (hi - lo), 1.0) if hi > lo else 0.0
    out.gpu_idle_ratio = 1.0 - out.gpu_busy_ratio
    out.compute_s = iv.length(unions[COMPUTE]) * _US
    out.communication_s = iv.length(unions[COMM]) * _US
    out.memcpy_s = iv.length(unions[MEMORY]) * _US
    comm_time = iv.length(unions[COMM])
    if comm_time > 0:
        out.overlap_ratio = iv.length(iv.intersection(unions[COMM], unions[COMPUTE])) / comm_time
    kernels = [e for e in events if e.kind != MEMORY]
    out.kernel_count = len(kernels)
    if kernels:
        short = sum(1 for e in kernels if e.end - e.start < short_kernel_s / _US)
        out.short_kernel_ratio = short / len(kernels)
    _top(out.top_kernels, _totals((e.name, e.end - e.start) for e in kernels), top_k, _US)
    if model.has_cpu:
        ops = ((model.launches[e.correlation].op, e.end - e.start) for e in events
               if e.correlation in model.launches)
        _top(out.top_ops, _totals((name, d) for name, d in ops if name), top_k, _US)
    _device_breakdown(out.breakdown, model, events, unions, (lo, hi), n_steps)


def _span(model: TraceModel) -> Tuple[float, float]:
    """Device timeline of the profiled steps, in trace microseconds (see module docstring)."""
    if model.has_cpu and model.steps:
        starts = [s for s, _ in model.steps]
        inside = []
        for e in model.gpu:
            launch = model.launches.get(e.correlation)
            if launch is not None:
                i = bisect.bisect_right(starts, launch.ts) - 1
                if i >= 0 and launch.ts <= model.steps[i][1]:
                    inside.append(e)
        if inside:
            return min(e.start for e in inside), max(e.end for e in inside)
    return min(e.start for e in model.gpu), max(e.end for e in model.gpu)


def _device_breakdown(out: agent_pb2.StepBreakdown, model: TraceModel, events: List[GpuEvent],
                      unions: Dict[int, list], span: Tuple[float, float], n_steps: int) -> None:
    lo, hi = span
    non_comm = iv.union(unions[COMPUTE] + unions[MEMORY])
    out.step_time_s = (hi - lo) * _US / n_steps
    out.communication_s = iv.subtract_length(unions[COMM], non_comm) * _US / n_steps
    if model.has_cpu:
        by_phase: Dict[int, list] = {FORWARD: [], BACKWARD: [], OPTIMIZER: []}
        for e in events:
            launch = model.launches.get(e.correlation) if e.kind != COMM else None
            if launch is not None and launch.phase != NONE:
                by_phase[FORWARD if launch.phase == STEP else launch.phase].append((e.start, e.end))
        # GPU idle while the host was inside an explicit phase range (Optimizer.step, the
        # autograd engine, a "forward" annotation): the host held the GPU up there, so that
        # phase is charged for the gap (host work before the optimizer's kernels, a
        # launch-bound backward). Idle elsewhere (data loading, a sync) stays "other".
        for phase, field in _GPU_FIELD.items():  # GPU work alone, before idle is charged
            setattr(out, field, iv.length(iv.clip(iv.union(by_phase[phase]), lo, hi)) * _US / n_steps)
        covered = iv.union(non_comm + unions[COMM])  # every GPU event, already clipped
        for phase in (OPTIMIZER, BACKWARD, FORWARD):
            host = iv.clip(iv.union((s, e) for s, e, p in model.phase_ranges if p == phase), lo, hi)
            held = iv.intersection(_gaps(covered, lo, hi), host)
            by_phase[phase].extend(held)
            covered = iv.union(covered + held)  # a gap is charged to one phase only
        for phase, field in _FIELD.items():
            setattr(out, field, iv.length(iv.clip(iv.union(by_phase[phase]), lo, hi)) * _US / n_steps)
    _finish_other(out)


def _gaps(merged: List[Tuple[float, float]], lo: float, hi: float) -> List[Tuple[float, float]]:
    """The complement of a merged list within ``[lo, hi)``."""
    out, at = [], lo
    for s, e in merged:
        if s > at:
            out.append((at, s))
        at = max(at, e)
    if hi > at:
        out.append((at, hi))
    return out


def _cpu_summary(out: agent_pb2.WindowSummary, model: TraceModel, n_steps: int,
                 top_k: int) -> None:
    """No GPU events: host timeline only (CPU training, or CUPTI events taken by someone else)."""
    _top(out.top_ops, model.cpu_self, top_k, _US)
    if not model.steps:
        return
    lo, hi = model.steps[0][0], max(end for _, end in model.steps)
    out.span_s = (hi - lo) * _US
    out.compute_s = iv.length(iv.clip(iv.union(model.cpu_ops), lo, hi)) * _US
    out.communication_s = iv.length(iv.clip(iv.union(model.comm_ranges), lo, hi)) * _US
    out.breakdown.step_time_s = out.span_s / n_steps
    for phase, field in _FIELD.items():
        merged = iv.clip(iv.union((s, e) for s, e, p in model.phase_ranges if p == phase), lo, hi)
        setattr(out.breakdown, field, iv.length(merged) * _US / n_steps)
    _finish_other(out.breakdown)


def _finish_other(out: agent_pb2.StepBreakdown) -> None:
    used = out.forward_s + out.backward_s + out.optimizer_s + out.communication_s
    out.other_s = max(out.step_time_s - used, 0.0)


def _totals(pairs: Iterable[Tuple[str, float]]) -> Dict[str, List[float]]:
    acc: Dict[str, List[float]] = {}
    for name, dur in pairs:
        slot = acc.get(name)
        if slot is None:
            acc[name] = [dur, 1]
        else:
            slot[0] += dur
            slot[1] += 1
    return acc


def _top(field, totals: Dict[str, List[float]], k: int, scale: float) -> None:
    """Append the ``k`` largest totals (name -> [time, count]) as NamedTime to ``field``."""
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))[:max(k, 0)]
    for name, (total, count) in ranked:
        field.add(name=name[:MAX_NAME_CHARS], seconds=total * scale, count=int(count))
