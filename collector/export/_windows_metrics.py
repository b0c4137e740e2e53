"""Prometheus export of profiler-window results and the agent's window accounting.

``window_families`` gives the families for one scrape (the per-rank mode's ``keep`` picks).
Window gauges describe the latest WindowSummary of each rank (arrival order); cumulative
window counts and the overhead ratio come from the latest AgentStats. Cardinality stays
bounded: kernel and op names appear only as the top ``top_k`` by position, truncated to 120
characters, and skip reasons are capped at ``MAX_SKIP_REASONS`` per rank.
"""

from __future__ import annotations

import statistics
from typing import Iterable, Optional

from ._exposition import Family, labels_text

__all__ = ["window_families", "MAX_NAME_CHARS", "MAX_SKIP_REASONS", "PHASES", "aligned_compute", "skew_ratio",
           "window_steps"]

MAX_NAME_CHARS = 120
MAX_SKIP_REASONS = 16
MAX_REASON_CHARS = 64
# (phase label, StepBreakdown field)
PHASES = (("step", "step_time_s"), ("forward", "forward_s"), ("backward", "backward_s"),
          ("optimizer", "optimizer_s"), ("communication", "communication_s"), ("other", "other_s"))
# (metric name, HELP, WindowSummary field)
_WINDOW = (
    ("stepwatch_window_gpu_busy_ratio", "Share of the last profiler window's device timeline with GPU work running, 0-1.",
     "gpu_busy_ratio"),
    ("stepwatch_window_gpu_idle_ratio", "Share of the last profiler window's device timeline with the GPU idle, 0-1.",
     "gpu_idle_ratio"),
    ("stepwatch_window_compute_seconds", "Device seconds in compute kernels in the last profiler window "
     "(host seconds in operators on a CPU-only job).", "compute_s"),
    ("stepwatch_window_communication_seconds", "Device seconds in communication (NCCL) kernels in the last profiler "
     "window (host seconds in collectives on a CPU-only job).", "communication_s"),
    ("stepwatch_window_memcpy_seconds", "Device seconds in memcpy and memset in the last profiler window.", "memcpy_s"),
    ("stepwatch_window_overlap_ratio", "Share of communication time overlapped by compute in the last profiler window, 0-1.",
     "overlap_ratio"),
    ("stepwatch_window_kernels", "Kernels launched in the last profiler window.", "kernel_count"),
    ("stepwatch_window_short_kernel_ratio", "Share of kernels shorter than 10 microseconds in the last profiler window, 0-1.",
     "short_kernel_ratio"),
    ("stepwatch_window_overhead_seconds", "Extra trainer time the last profiler window cost (slower steps and export).",
     "overhead_s"),
    ("stepwatch_window_analysis_seconds", "Seconds the agent sidecar spent analysing the last profiler window's trace.",
     "analysis_s"),
)


def window_families(t, labels: list, full: bool, top_k: int) -> list[Family]:
    """The window families of the scrape's :class:`~._rank_table.RankTable` ``t``, ``labels``
    its ranks' label texts. Summary mode: the overhead ratio, compute and total communication
    per step."""
    latest = [w[-1] if w else None for w in t.windows]
    fams = [*_stats(t, labels, full), *_skew(latest, labels, full)]
    return fams + list(_window(latest, labels, top_k)) if full else fams


def _stats(t, labels: list, full: bool) -> tuple:
    overhead = Family("stepwatch_agent_overhead_ratio",
                      "Share of wall time since attach spent on profiler windows (after the "
                      "warm-up one), captures and their export, 0-1.", "gauge")
    windows = Family("stepwatch_windows", "Profiler windows taken by the agent (warm-up window included).", "counter")
    skips = Family("stepwatch_window_skips", "Profiler windows the agent did not take, by reason.", "counter")
    warmup = Family("stepwatch_agent_window_warmup_seconds",
                    "One-time cost of the agent's warm-up profiler window (not in the overhead ratio).", "gauge")
    aftereffect = Family("stepwatch_agent_window_aftereffect_ratio",
                         "Wall time per step in the 50 s after the agent's last checked profiler "
                         "session over the 25 s before it (0: none checked yet); at 1.02 or more "
                         "in both halves the agent drops that kind of session.", "gauge")
    overhead.add_column(labels, t.raw("stats", "overhead_ratio"))
    aftereffect.add_column(labels, t.raw("stats", "window_aftereffect_ratio"))
    if full:
        warmup.add_column(labels, t.raw("stats", "window_warmup_s"))
        windows.add_column(labels, t.raw("stats", "windows"))
        for lab, stats in zip(labels, t.stats):
            if stats is not None:
                for reason, n in skip_reasons(dict(stats.window_skips)):
                    skips.add(lab, n, labels_text(("reason",), (reason,)))
    return overhead, aftereffect, warmup, windows, skips


def skip_reasons(skips: dict) -> list[tuple[str, int]]:
    """Reasons sorted by name, truncated; past ``MAX_SKIP_REASONS`` the rest add up under "other"."""
    out: dict[str, int] = {}
    for reason in sorted(skips):
        name = reason[:MAX_REASON_CHARS] or "unknown"
        if name not in out and len(out) >= MAX_SKIP_REASONS - 1:
            name = "other"
        out[name] = out.get(name, 0) + skips[reason]
    return sorted(out.items())


def _window(latest: list, labels: list, top_k: int) -> tuple:
    scalars = [Family(name, doc, "gauge") for name, doc, _ in _WINDOW]
    phase = Family("stepwatch_window_step_phase_seconds",
                   "Device seconds of one average step by phase in the last profiler window.", "gauge")
    kernels = Family("stepwatch_window_top_kernel_seconds",
                     "Device seconds of the top kernels in the last profiler window (position 1 = most).", "gauge")
    ops = Family("stepwatch_window_top_op_seconds",
                 "Self device seconds of the top operators in the last profiler window (position 1 = most).", "gauge")
    compile_health = [
        Family("stepwatch_window_graph_breaks", "torch.compile graph breaks between the "
               "last two profiler windows (only for jobs that use torch.compile).", "gauge"),
        Family("stepwatch_window_recompiles", "Graphs torch.compile compiled between the "
               "last two profiler windows (only for jobs that use torch.compile).", "gauge")]
    for lab, win in zip(labels, latest):
        if win is None:
            continue
        for fam, field in zip(compile_health, ("graph_breaks", "recompiles")):
            if win.HasField(field):
                fam.add(lab, float(getattr(win, field)))
        for fam, (_, _, field) in zip(scalars, _WINDOW):
            fam.add(lab, float(getattr(win, field)))
        if win.HasField("breakdown"):
            for name, field in PHASES:
                phase.add(lab, getattr(win.breakdown, field), f'phase="{name}"')
        _add_top(kernels, lab, win.top_kernels, top_k, "kernel")
        _add_top(ops, lab, win.top_ops, top_k, "op")
    return (*scalars, phase, kernels, ops, *compile_health)


def window_steps(win) -> int:
    """Profiled steps of a WindowSummary (0 when its step range is unknown)."""
    return win.last_step - win.first_step + 1 if win.last_step >= win.first_step > 0 else 0


def _aligned(ranks: Iterable[tuple[int, Iterable]]) -> Optional[tuple[int, dict]]:
    """``(first step, {rank: window})`` of one job's latest steps windowed on the most ranks
    (windows are taken at the same global steps on every rank; a rank's last window may not
    have arrived yet), or None when no window has a step range."""
    by_step: dict[int, dict] = {}
    for rank, windows in ranks:
        for win in windows:
            first = win.first_step
            if win.last_step >= first > 0:  # (window_steps, inline: every kept window of every rank)
                by_step.setdefault(first, {})[rank] = win
    if not by_step:
        return None
    most = max(len(v) for v in by_step.values())
    first = max(f for f, v in by_step.items() if len(v) == most)
    return first, by_step[first]


def skew_ratio(ranks: Iterable[tuple[int, Iterable]]) -> Optional[float]:
    """``ranks``: one job's ``(rank, its kept windows)``. The slowest rank's compute per step
    over the median rank's at the aligned steps (:func:`aligned_compute`), or None."""
    aligned = _aligned(ranks)
    if aligned is None or len(aligned[1]) < 2:
        return None
    return _max_over_median([w.compute_s / window_steps(w) for w in aligned[1].values()])


def _max_over_median(per_step) -> Optional[float]:
    """The largest of the ranks' compute per step over their median; None where the median is
    not positive."""
    mid = statistics.median(per_step)
    return None if mid <= 0 else max(per_step) / mid


def aligned_compute(ranks: Iterable[tuple[int, Iterable]]) -> Optional[dict]:
    """``ranks``: one job's ``(rank, its kept windows)``. Per-rank figures of its latest steps
    windowed on the most ranks: ``{"first_step", "skew_ratio", "ranks": [{"rank",
    "compute_s_per_step", "communication_s_per_step", "exposed_communication_s_per_step",
    "share_of_slowest"}]}``, or None with fewer than two ranks there. ``skew_ratio`` = max /
    median compute per step."""
    aligned = _aligned(ranks)
    if aligned is None:
        return None
    first, wins = aligned
    per_step = {r: w.compute_s / window_steps(w) for r, w in wins.items()}
    ratio = _max_over_median(list(per_step.values())) if len(wins) >= 2 else None
    if ratio is None:
        return None
    slowest = max(per_step.values())
    return {"first_step": first, "skew_ratio": ratio,
            "ranks": [{"rank": r, "compute_s_per_step": per_step[r],
                       "communication_s_per_step": w.communication_s / window_steps(w),
                       "exposed_communication_s_per_step": w.breakdown.communication_s,
                       "share_of_slowest": per_step[r] / slowest}
                      for r, w in sorted(wins.items())]}


def _skew(latest: list, labels: list, full: bool) -> tuple:
    """Per-rank compute and communication per profiled step (latest window)."""
    compute = Family("stepwatch_rank_compute_seconds_per_step",
                     "Compute seconds per step in the rank's last profiler window (device kernels; "
                     "host operators for CPU training).", "gauge")
    comm = Family("stepwatch_rank_communication_seconds_per_step",
                  "Communication seconds per step in the rank's last profiler window: total, or "
                  "exposed (not overlapped by compute).", "gauge")
    steps = [w.last_step - w.first_step + 1 if w is not None and w.last_step >= w.first_step > 0 else 0
             for w in latest]  # (window_steps, inline)
    if not full:
        compute.add_column(labels, [w.compute_s / n if n else None for w, n in zip(latest, steps)])
        comm.add_column(labels, [w.communication_s / n if n else None for w, n in zip(latest, steps)], 'kind="total"')
        return compute, comm
    for lab, win, n in zip(labels, latest, steps):
        if n:
            compute.add(lab, win.compute_s / n)
            comm.add(lab, win.communication_s / n, 'kind="total"')
            if win.HasField("breakdown"):
                comm.add(lab, win.breakdown.communication_s, 'kind="exposed"')
    return compute, comm


def _add_top(fam: Family, labels: str, named, top_k: int, what: str) -> None:
    """Add the ``top_k`` largest entries; a name repeated after truncation keeps its first position."""
    seen = set()
    for item in sorted(named, key=lambda n: -n.seconds if n.seconds == n.seconds else 0.0):  # NaN ranks as 0 s
        if len(seen) >= top_k:
            break
        name = item.name[:MAX_NAME_CHARS] or "unknown"
        if name in seen:
            continue
        seen.add(name)
        fam.add(labels, item.seconds, labels_text((what, "position"), (name, len(seen))))
