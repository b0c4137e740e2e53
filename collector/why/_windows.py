"""Profiler windows compared across an onset: the phases (forward, backward, optimizer,
communication, other) and the kernels or operators that grew, the GPU's own wait discounted."""

from __future__ import annotations

from typing import Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ._words import _short

__all__ = ["compare_windows"]

_PHASES = ("forward", "backward", "optimizer", "communication", "other")
_EXPLAINED = 0.3          # a top contributor below this share of the change explains nothing


def _per_step(w: agent_pb2.WindowSummary) -> float:
    """1 / the number of profiled steps (from the breakdown: span / step time)."""
    if w.span_s > 0 and w.breakdown.step_time_s > 0:
        return w.breakdown.step_time_s / w.span_s
    return 1.0 / max(1, w.last_step - w.first_step + 1)


def _phases(w: agent_pb2.WindowSummary) -> dict[str, float]:
    b = w.breakdown
    return {"forward": b.forward_s, "backward": b.backward_s, "optimizer": b.optimizer_s,
            "communication": b.communication_s, "other": b.other_s}


def _listed(w: agent_pb2.WindowSummary):
    """The window's top list: its kernels (GPU windows) or operators (CPU windows)."""
    return w.top_kernels if w.top_kernels else w.top_ops


def _named(w: agent_pb2.WindowSummary) -> dict[str, float]:
    """Seconds per step by kernel name (GPU windows) or operator name (CPU windows)."""
    return {n.name: n.seconds * _per_step(w) for n in _listed(w)}


def _grew_most(wb: agent_pb2.WindowSummary, wa: agent_pb2.WindowSummary) -> tuple[Optional[str], float, bool]:
    """(name, ms per step, new) of the kernel or operator that grew most from ``wb`` to ``wa``.

    A window lists only its top names: one missing from ``wb``'s list while that list is as long
    as ``wa``'s may have been just below its cut, so it is counted at ``wb``'s smallest listed
    time (its growth at least that much) and never called new; "new" only where ``wb``'s list is
    shorter (not cut). A LayerNorm backward kernel of 1.0 ms a step pushed out of a list by a
    slowdown's extra kernel otherwise reads "+1.0 ms, new" once the slowdown ends."""
    nb, na = _named(wb), _named(wa)
    cut = bool(nb) and len(_listed(wb)) >= len(_listed(wa))
    floor = min(nb.values()) if cut else 0.0
    top = max(na, key=lambda n: na[n] - nb.get(n, floor), default=None)
    if top is None:
        return None, 0.0, False
    return top, (na[top] - nb.get(top, floor)) * 1e3, top not in nb and not cut


def _grown_text(top: str, grew: float, new: bool) -> str:
    return f"{_short(top)} +{grew:.1f} ms" + (", new" if new else "")


def _add_kernel(found: list, wb: agent_pb2.WindowSummary, wa: agent_pb2.WindowSummary) -> list:
    """The kernel or operator that grew most from window ``wb`` to ``wa``, named on the phase
    that grew most when it accounts for >= 25% of that phase's growth."""
    top, grew, new = _grew_most(wb, wa)
    if top is None or not found:
        return found
    phases = [j for j, c in enumerate(found) if c[0] != "host CPU"]
    if not phases:
        return found
    i = max(phases, key=lambda j: found[j][1])
    name, d, detail = found[i]
    if grew > 0 and grew >= 0.25 * d and not name.startswith("data"):
        extra = _grown_text(top, grew, new)
        found = list(found)
        found[i] = (name, d, f"{detail}, {extra}" if detail else extra)
    return found


def compare_windows(wb: agent_pb2.WindowSummary, wa: agent_pb2.WindowSummary) -> list[tuple[str, float, str]]:
    """Phase changes per step (ms) from window ``wb`` to ``wa``, largest first: a phase's wall
    share, or the GPU work launched in it when that grew more ("GPU work" in the detail); the
    phase that grew most names the kernel/op that grew most when it accounts for >= 25% of it
    (windows do not say which phase a kernel ran in)."""
    pb, pa = _phases(wb), _phases(wa)
    gb, ga = _gpu_work(wb), _gpu_work(wa)
    top, grew, new = _grew_most(wb, wa)
    work = {p: (ga[p] - gb[p]) * 1e3 for p in ga if p in gb}
    deltas, by_work, delayed = [], set(), {}
    for p in _PHASES:
        d = (pa[p] - pb[p]) * 1e3
        if p in work and work[p] > d:
            # Profiled steps are slower on the host: extra GPU work can fill idle time the phase
            # was already charged for, so its wall share hardly moves while its GPU work grows.
            d = work[p]
            by_work.add(p)
        elif work:
            # A phase longer by more than its own GPU work, while another phase's GPU work grew,
            # was (up to that growth) held up by that work: GEMMs queued in forward run while
            # the host is in backward and delay backward's kernels (measured on an H100: forward
            # +2.0 ms of GPU work showed as backward +2.5 ms of wall time).
            others = sum(max(0.0, v) for q, v in work.items() if q != p)
            excess = d - max(0.0, work.get(p, 0.0))
            if others > 0 and excess > 0:
                delayed[p] = min(excess, others)
                d -= delayed[p]
        deltas.append((p, d))
    out = []
    for i, (p, d) in enumerate(sorted(deltas, key=lambda x: -x[1])):
        parts = ["GPU work"] if p in by_work and d >= 0.1 else []
        if delayed.get(p, 0.0) >= 0.1:
            parts.append(f"after {delayed[p]:.1f} ms of delay by other phases' GPU work")
        if i == 0 and grew > 0 and grew >= 0.25 * d:
            parts.append(_grown_text(top, grew, new))
        out.append((p, d, ", ".join(parts)))
    return out


def _gpu_work(w: agent_pb2.WindowSummary) -> dict[str, float]:
    """GPU work per step launched in each phase (windows with a device timeline only)."""
    b = w.breakdown
    if not w.gpu_event_count or not (b.forward_gpu_s or b.backward_gpu_s or b.optimizer_gpu_s):
        return {}
    return {"forward": b.forward_gpu_s, "backward": b.backward_gpu_s, "optimizer": b.optimizer_gpu_s}


def _gpu_work_per_step(w: agent_pb2.WindowSummary) -> Optional[float]:
    """GPU busy seconds per step of a window with a device timeline, else None."""
    if not w.gpu_event_count or w.span_s <= 0 or w.breakdown.step_time_s <= 0:
        return None
    return w.gpu_busy_ratio * w.breakdown.step_time_s


def _discount_gpu_wait(found: list, wb: agent_pb2.WindowSummary, wa: agent_pb2.WindowSummary) -> list:
    """A host waiting for a busier GPU (``loss.item()``, a synchronize) spins: its CPU time per
    step grows with the GPU's work. Host CPU growth up to the GPU busy-time growth is that wait,
    not a cause (measured on an H200: +6.1 ms of GEMMs showed as host CPU +6.6 ms)."""
    gb, ga = _gpu_work_per_step(wb), _gpu_work_per_step(wa)
    if gb is None or ga is None or ga <= gb:
        return found
    wait = (ga - gb) * 1e3
    return [(name, delta - min(delta, wait), f"after {min(delta, wait):.1f} ms of waiting for the GPU")
            if name == "host CPU" and delta > 0 else (name, delta, detail) for name, delta, detail in found]


def _rank_key(c: tuple, step_delta: float) -> float:
    """Named contributors before "other" (the unattributed rest) and host CPU (which overlaps
    the phases) unless those explain much more."""
    name, delta, _ = c
    return delta * (0.5 if name in ("other", "host CPU") else 1.0)
