"""Reading a Kineto / torch.profiler Chrome trace into the few lists the analysis needs.

One pass over ``traceEvents`` sorts complete ("X") events into GPU work (kernels, memcpy,
memset), CUDA runtime/driver launches, CPU ranges (``cpu_op`` and ``user_annotation``, i.e.
aten ops and ``record_function`` ranges) and ``ProfilerStep#N`` ranges; then one sweep per
CPU thread links each launch to its innermost enclosing range and to a training phase.
Times stay in the trace's microseconds here. Called on the sidecar's analysis thread.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
from collections import defaultdict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

__all__ = ["COMM", "COMPUTE", "MEMORY", "PHASES", "GpuEvent", "Launch", "TraceError",
           "TraceModel", "load_events", "build_model"]

# GPU event kinds.
COMPUTE, COMM, MEMORY = 0, 1, 2
# Training phases of a launch; STEP means "inside a ProfilerStep, nothing more specific",
# which the analysis counts as forward.
NONE, STEP, FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2, 3, 4
PHASES = (FORWARD, BACKWARD, OPTIMIZER)

_GPU_KINDS = {"kernel": COMPUTE, "gpu_memcpy": MEMORY, "gpu_memset": MEMORY,
              "memcpy": MEMORY, "memset": MEMORY}
# Event category -> role; older Kineto versions capitalize ("Kernel", "Runtime", "Operator").
_GPU, _LAUNCH, _OP, _ANNOTATION = 0, 1, 2, 3
_ROLES = {}
for _cat, _role in [("kernel", _GPU), ("gpu_memcpy", _GPU), ("gpu_memset", _GPU),
                    ("memcpy", _GPU), ("memset", _GPU), ("cuda_runtime", _LAUNCH),
                    ("cuda_driver", _LAUNCH), ("runtime", _LAUNCH), ("cpu_op", _OP),
                    ("operator", _OP), ("user_annotation", _ANNOTATION)]:
    _ROLES[_cat] = _ROLES[_cat.capitalize()] = _role
_STEP_PREFIX = "ProfilerStep#"
# Collective ranges on the host: process-group backends annotate their work ("gloo:all_reduce",
# "nccl:all_reduce"), the c10d dispatcher ops ("c10d::allreduce_") and record_param_comms.
COMM_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:", "c10d::", "record_param_comms")


class TraceError(ValueError):
    """The input is not a readable Chrome trace; the message says why."""


class GpuEvent(NamedTuple):
    start: float
    end: float
    kind: int
    name: str
    correlation: Optional[int]


class Launch(NamedTuple):
    """What launched a GPU event: host time, innermost enclosing op (None: none) and phase."""
    ts: float
    op: Optional[str]
    phase: int


class TraceModel(NamedTuple):
    gpu: List[GpuEvent]
    launches: Dict[int, Launch]
    steps: List[Tuple[float, float]]
    has_cpu: bool
    # name -> [self microseconds, count] of cpu_op ranges, and (start, end, phase) of every
    # CPU range with an explicit phase (for CPU-only traces).
    cpu_self: Dict[str, List[float]]
    phase_ranges: List[Tuple[float, float, int]]
    # (start, end) of cpu_op ranges inside a step or phase that are not communication, and of
    # every communication range (``gloo:``/``nccl:`` annotations, ``c10d::`` ops), any thread:
    # the host-side compute and collectives of CPU-only traces.
    cpu_ops: List[Tuple[float, float]]
    comm_ranges: List[Tuple[float, float]]


def load_events(source: Union[str, os.PathLike, dict, bytes]) -> List[dict]:
    """``traceEvents`` of a trace given as a path (plain or gzip JSON), raw bytes or a decoded
    dict. Raises :class:`TraceError` (a ValueError) or OSError."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            source = f.read()
    if isinstance(source, (bytes, bytearray)):
        try:
            if source[:2] == b"\x1f\x8b":
                source = gzip.decompress(source)
            source = json.loads(source)
        except (OSError, EOFError, ValueError, UnicodeDecodeError) as exc:
            raise TraceError(f"not JSON: {exc}"[:300]) from None
    events = source.get("traceEvents") if isinstance(source, dict) else None
    if not isinstance(events, list):
        raise TraceError("not a Chrome trace: no traceEvents list")
    return events


def build_model(events: List[dict]) -> TraceModel:
    """Collect and link everything the analysis needs (see the module docstring)."""
    gpu: List[GpuEvent] = []
    ranges: Dict[Any, list] = defaultdict(list)
    launches: Dict[Any, list] = defaultdict(list)
    steps: List[Tuple[float, float]] = []
    autograd = set()
    for ev in events:
        ph = ev.get("ph") if isinstance(ev, dict) else None
        if ph != "X":
            if ph == "M" and ev.get("name") == "thread_name" \
                    and "autograd" in str((ev.get("args") or {}).get("name", "")):
                autograd.add((ev.get("pid"), ev.get("tid")))
            continue
        role = _ROLES.get(ev.get("cat"))
        if role is None or ev.get("ts") is None:
            continue
        ts = float(ev["ts"])
        end = ts + float(ev.get("dur") or 0.0)
        if role == _GPU:
            gpu.append(_gpu_event(ev, ts, end))
        elif role == _LAUNCH:
            corr = (ev.get("args") or {}).get("correlation")
            if corr is not None:
                launches[(ev.get("pid"), ev.get("tid"))].append((ts, 1, 0.0, int(corr)))
        else:
            name = str(ev.get("name", ""))
            if name.startswith(_STEP_PREFIX):
                steps.append((ts, end))
            ranges[(ev.get("pid"), ev.get("tid"))].append((ts, 0, -end, name, role == _ANNOTATION))
    linked: Dict[int, Launch] = {}
    cpu_self: Dict[str, List[float]] = {}
    phase_ranges: List[Tuple[float, float, int]] = []
    cpu_ops: List[Tuple[float, float]] = []
    comm: List[Tuple[float, float]] = []
    top_level: List[Tuple[float, float]] = []
    for thread in set(ranges) | set(launches):
        _sweep(ranges.get(thread, []), launches.get(thread, []), thread in autograd,
               linked, cpu_self, phase_ranges, (cpu_ops, comm), top_level)
    steps.sort()
    phase_ranges.extend(_implicit_forward(steps, top_level, phase_ranges))
    return TraceModel(gpu, linked, steps, bool(ranges), cpu_self, phase_ranges, cpu_ops, comm)


def _implicit_forward(steps: List[Tuple[float, float]], top_level: List[Tuple[float, float]],
                      phase_ranges: List[Tuple[float, float, int]]) -> List[Tuple[float, float, int]]:
    """Forward ranges of models without a "forward" annotation: the operators directly under a
    ``ProfilerStep#N`` range (a plain ``model(x)`` and the loss; record_function ranges such as
    the DataLoader's are not operators) that start before the step's first backward range. With
    no backward in the step (evaluation) every such operator is forward. Steps that carry an
    explicit forward range keep only that."""
    if not steps or not top_level:
        return []
    starts = [s for s, _ in steps]
    cut = [e for _, e in steps]  # per step: the first backward start, else the step's end
    explicit = [False] * len(steps)
    for s, _, phase in phase_ranges:
        i = bisect.bisect_right(starts, s) - 1
        if i < 0 or s > steps[i][1]:
            continue
        if phase == BACKWARD:
            cut[i] = min(cut[i], s)
        elif phase == FORWARD:
            explicit[i] = True
    out = []
    for s, e in top_level:
        i = bisect.bisect_right(starts, s) - 1
        if i >= 0 and not explicit[i] and s < cut[i] and s <= steps[i][1]:
            out.append((s, min(e, cut[i]), FORWARD))
    return out


def _gpu_event(ev: dict, ts: float, end: float) -> GpuEvent:
    name = str(ev.get("name", ""))
    kind = _GPU_KINDS[str(ev.get("cat")).lower()]
    if kind == COMPUTE and "nccl" in name.lower():
        kind = COMM
    corr = (ev.get("args") or {}).get("correlation")
    return GpuEvent(ts, end, kind, name, int(corr) if corr is not None else None)


_PHASE_CACHE: Dict[Tuple[str, bool], int] = {}


def own_phase(name: str, annotation: bool) -> int:
    """Phase a CPU range sets for what runs under it (NONE: inherit from the parent).

    Backward: ``autograd::engine::evaluate_function*`` ops; optimizer: torch's
    ``Optimizer.step#``/``Optimizer.zero_grad#`` ranges; ``ProfilerStep#N``: STEP. Other
    ``record_function`` ranges whose name contains "backward", "optimizer" or "forward"
    (case-insensitive, in that order) set that phase (e.g. ``DistributedDataParallel.forward``).
    """
    key = (name, annotation)
    phase = _PHASE_CACHE.get(key)
    if phase is None:
        phase = _classify(name, annotation)
        if len(_PHASE_CACHE) < 100_000:
            _PHASE_CACHE[key] = phase
    return phase


def _classify(name: str, annotation: bool) -> int:
    if name.startswith("autograd::engine::evaluate_function"):
        return BACKWARD
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return OPTIMIZER
    if name.startswith(_STEP_PREFIX):
        return STEP
    if annotation:
        low = name.lower()
        for word, phase in (("backward", BACKWARD), ("optimizer", OPTIMIZER), ("forward", FORWARD)):
            if word in low:
                return phase
    return NONE


def _sweep(ranges: list, launches: list, autograd_thread: bool, linked: Dict[int, Launch],
           cpu_self: Dict[str, List[float]], phase_ranges: list, host: Tuple[list, list],
           top_level: list) -> None:
    """One thread: walk ranges (outer before inner) and launches in time order with a stack.

    Ranges that start at a launch's timestamp enclose it (sort key ``(ts, 0, -end)`` before
    ``(ts, 1, ...)``). A range's phase is its own (:func:`own_phase`) or its parent's; on an
    autograd engine thread everything is backward. Self time of a ``cpu_op`` is its duration
    minus that of its direct children. ``host`` = (compute ops, communication ranges) to
    append to (see :class:`TraceModel`); ``top_level`` gets (start, end) of the operators whose
    parent is a ``ProfilerStep#N`` range (candidates for :func:`_implicit_forward`).
    """
    items = ranges + launches
    items.sort()
    stack: list = []   # [end, name, phase, annotation, self_us]
    for item in items:
        ts = item[0]
        while stack and stack[-1][0] <= ts:
            _close(stack.pop(), cpu_self)
        if item[1] == 1:  # a launch
            top = _op_frame(stack)
            phase = BACKWARD if autograd_thread else (stack[-1][2] if stack else NONE)
            linked[item[3]] = Launch(ts, top[1] if top else None, phase)
            continue
        end, name, annotation = -item[2], item[3], item[4]
        parent_phase = stack[-1][2] if stack else NONE
        phase = BACKWARD if autograd_thread else (own_phase(name, annotation) or parent_phase)
        if phase in PHASES and phase != parent_phase:
            phase_ranges.append((ts, end, phase))
        if not annotation and not autograd_thread and phase == STEP and stack \
                and stack[-1][2] == STEP and stack[-1][1].startswith(_STEP_PREFIX):
            top_level.append((ts, end))
        if name.startswith(COMM_PREFIXES):
            host[1].append((ts, end))
        elif not annotation and phase != NONE:
            host[0].append((ts, end))
        if stack:
            stack[-1][4] -= end - ts
        stack.append([end, name, phase, annotation, end - ts])
    while stack:
        _close(stack.pop(), cpu_self)


def _op_frame(stack: list) -> Optional[list]:
    """Innermost frame that names an op (ProfilerStep#N ranges never do: unbounded names)."""
    for frame in reversed(stack):
        if not frame[1].startswith(_STEP_PREFIX):
            return frame
    return None


def _close(frame: list, cpu_self: Dict[str, List[float]]) -> None:
    if frame[3]:  # record_function ranges have no self time worth ranking
        return
    acc = cpu_self.get(frame[1])
    if acc is None:
        cpu_self[frame[1]] = [max(frame[4], 0.0), 1]
    else:
        acc[0] += max(frame[4], 0.0)
        acc[1] += 1
