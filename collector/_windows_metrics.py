"""Prometheus export of profiler-window results and the agent's window accounting.

``window_families`` gives the families for one scrape (the per-rank mode's ``keep`` picks).
Window gauges describe the latest WindowSummary of each rank (arrival order); cumulative
window counts and the overhead ratio come from the latest AgentStats. Cardinality stays
bounded: kernel and op names appear only as the top ``top_k`` by position, truncated to 120
characters, and skip reasons are capped at ``MAX_SKIP_REASONS`` per rank.
"""

from __future__ import annotations

import statistics
from typing import Optional

from ._exposition import Family, labels_text
from ._state import RankState

__all__ = ["window_families", "MAX_NAME_CHARS", "MAX_SKIP_REASONS", "PHASES", "aligned_compute", "window_steps"]

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


def window_families(rows, full: bool, top_k: int) -> list[Family]:
    """The window families; ``rows`` = [(rank state, rank labels, ...)] (:class:`RankMetrics`).
    Summary mode: the overhead ratio, compute and total communication per step, and the job skew."""
    fams = [*_stats(rows, full), *_skew(rows, full)]
    return fams + list(_window(rows, top_k)) if full else fams


def _stats(rows, full: bool) -> tuple:
    overhead = Family("stepwatch_agent_overhead_ratio",
                      "Share of wall time since attach spent on profiler windows (after the "
                      "warm-up one), captures and their export, 0-1.", "gauge")
    windows = Family("stepwatch_windows", "Profiler windows taken by the agent (warm-up window included).", "counter")
    skips = Family("stepwatch_window_skips", "Profiler windows the agent did not take, by reason.", "counter")
    warmup = Family("stepwatch_agent_window_warmup_seconds",
                    "One-time cost of the agent's warm-up profiler window (not in the overhead ratio).", "gauge")
    for st, labels, *_ in rows:
        if st.stats is None:
            continue
        overhead.add(labels, st.stats.overhead_ratio)
        if not full:
            continue
        warmup.add(labels, st.stats.window_warmup_s)
        windows.add(labels, st.stats.windows)
        for reason, n in skip_reasons(dict(st.stats.window_skips)):
            skips.add(labels, n, labels_text(("reason",), (reason,)))
    return overhead, warmup, windows, skips


def skip_reasons(skips: dict) -> list[tuple[str, int]]:
    """Reasons sorted by name, truncated; past ``MAX_SKIP_REASONS`` the rest add up under "other"."""
    out: dict[str, int] = {}
    for reason in sorted(skips):
        name = reason[:MAX_REASON_CHARS] or "unknown"
        if name not in out and len(out) >= MAX_SKIP_REASONS - 1:
            name = "other"
        out[name] = out.get(name, 0) + skips[reason]
    return sorted(out.items())


def _window(rows, top_k: int) -> tuple:
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
    for st, labels, *_ in rows:
        if not st.windows:
            continue
        win = st.windows[-1]
        for fam, field in zip(compile_health, ("graph_breaks", "recompiles")):
            if win.HasField(field):
                fam.add(labels, float(getattr(win, field)))
        for fam, (_, _, field) in zip(scalars, _WINDOW):
            fam.add(labels, float(getattr(win, field)))
        if win.HasField("breakdown"):
            for name, field in PHASES:
                phase.add(labels, getattr(win.breakdown, field), f'phase="{name}"')
        _add_top(kernels, labels, win.top_kernels, top_k, "kernel")
        _add_top(ops, labels, win.top_ops, top_k, "op")
    return (*scalars, phase, kernels, ops, *compile_health)


def window_steps(win) -> int:
    """Profiled steps of a WindowSummary (0 when its step range is unknown)."""
    return win.last_step - win.first_step + 1 if win.last_step >= win.first_step > 0 else 0


def aligned_compute(states: list[RankState]) -> Optional[dict]:
    """Per-rank figures of one job's latest steps windowed on the most ranks (windows are taken
    at the same global steps on every rank; a rank's last window may not have arrived yet):
    ``{"first_step", "skew_ratio", "ranks": [{"rank", "compute_s_per_step",
    "communication_s_per_step", "exposed_communication_s_per_step", "share_of_slowest"}]}``,
    or None with fewer than two ranks there. ``skew_ratio`` = max / median compute per step."""
    by_step: dict[int, list] = {}
    for st in states:
        for win in st.windows:
            if window_steps(win):
                by_step.setdefault(win.first_step, {})[st.rank] = win
    if not by_step:
        return None
    most = max(len(v) for v in by_step.values())
    first = max(f for f, v in by_step.items() if len(v) == most)
    wins = by_step[first]
    per_step = {r: w.compute_s / window_steps(w) for r, w in wins.items()}
    slowest, mid = max(per_step.values()), statistics.median(per_step.values())
    if len(wins) < 2 or mid <= 0:
        return None
    return {"first_step": first, "skew_ratio": slowest / mid,
            "ranks": [{"rank": r, "compute_s_per_step": per_step[r],
                       "communication_s_per_step": w.communication_s / window_steps(w),
                       "exposed_communication_s_per_step": w.breakdown.communication_s,
                       "share_of_slowest": per_step[r] / slowest}
                      for r, w in sorted(wins.items())]}


def _skew(rows, full: bool) -> tuple:
    """Per-rank compute and communication per profiled step (latest window)."""
    compute = Family("stepwatch_rank_compute_seconds_per_step",
                     "Compute seconds per step in the rank's last profiler window (device kernels; "
                     "host operators for CPU training).", "gauge")
    comm = Family("stepwatch_rank_communication_seconds_per_step",
                  "Communication seconds per step in the rank's last profiler window: total, or "
                  "exposed (not overlapped by compute).", "gauge")
    for st, labels, *_ in rows:
        win = st.windows[-1] if st.windows else None
        steps = window_steps(win) if win is not None else 0
        if not steps:
            continue
        compute.add(labels, win.compute_s / steps)
        comm.add(labels, win.communication_s / steps, 'kind="total"')
        if full and win.HasField("breakdown"):
            comm.add(labels, win.breakdown.communication_s, 'kind="exposed"')
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
