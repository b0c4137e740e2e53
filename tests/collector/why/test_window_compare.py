"""Profiler windows compared across an onset: which kernel grew, read from lists cut at the top."""

from __future__ import annotations

import pathlib

from google.protobuf import json_format

from stepwatch.collector.tools.corpus import load
from stepwatch.collector.why import compare_windows
from stepwatch.proto.stepwatch.v1 import agent_pb2

REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real" / "diag"


def _window(kernels: dict, optimizer_ms: float) -> agent_pb2.WindowSummary:
    """Three profiled steps of 40 ms; ``kernels``: name -> ms per step, listed largest first."""
    w = agent_pb2.WindowSummary(first_step=1, last_step=3, span_s=0.120, gpu_event_count=100)
    w.breakdown.CopyFrom(agent_pb2.StepBreakdown(step_time_s=0.040, forward_s=0.010, backward_s=0.020,
                                                 optimizer_s=optimizer_ms / 1e3, other_s=0.005))
    for name, ms in sorted(kernels.items(), key=lambda kv: -kv[1]):
        w.top_kernels.add(name=name, seconds=3 * ms / 1e3, count=30)
    return w


def test_a_kernel_that_entered_a_cut_list_is_not_called_new_nor_grown_by_its_whole_time():
    """Before: an extra GEMM pushed LayerNorm's backward kernel (1.0 ms) out of a list of three;
    after: the GEMM is gone and the LayerNorm kernel is back in the list. It never grew."""
    before = _window({"gemm": 7.0, "extra_gemm": 2.0, "elementwise": 1.1}, optimizer_ms=5.0)
    after = _window({"gemm": 7.0, "elementwise": 1.1, "layer_norm_backward": 1.0}, optimizer_ms=6.0)
    (first, d, detail), *_ = compare_windows(before, after)
    assert (first, round(d, 1)) == ("optimizer", 1.0) and "layer_norm" not in detail and "new" not in detail, \
        (first, d, detail)


def test_a_kernel_missing_from_a_list_that_was_not_cut_is_new():
    """The list before is shorter than the list after, so it held every kernel: one missing there
    ran no time before."""
    before = _window({"gemm": 7.0, "elementwise": 1.1}, optimizer_ms=5.0)
    after = _window({"gemm": 7.0, "elementwise": 1.1, "adam_for_loop": 1.0}, optimizer_ms=6.0)
    (first, d, detail), *_ = compare_windows(before, after)
    assert first == "optimizer" and detail == "adam_for_loop +1.0 ms, new", (first, d, detail)


def test_a_real_layer_norm_kernel_back_in_the_list_after_a_gemm_slowdown_is_not_named():
    """h200zzb_1gpu_m_pulses: the window inside the backward GEMMs' episode (steps 4,898-4,900)
    lists an extra elementwise kernel and so not LayerNorm's backward (3.1 ms a window, its
    cut at 3.2 ms); the window after (9,169-9,171) lists it. Compared, it read "GammaBetaBackward
    +1.0 ms, new" on the optimizer phase, a kernel of backward that neither grew nor ran there."""
    ws = {w["first_step"]: w for o in load(str(REAL / "h200zzb_1gpu_m_pulses.jsonl.gz")) if o["kind"] == "batch"
          for w in o["batch"].get("windows", ())}
    before, after = (json_format.ParseDict(ws[s], agent_pb2.WindowSummary()) for s in ("4898", "9169"))
    assert any("GammaBetaBackward" in k.name for k in after.top_kernels) and not any(
        "GammaBetaBackward" in k.name for k in before.top_kernels)
    changes = compare_windows(before, after)
    assert not any("GammaBetaBackward" in detail or "new" in detail for _, _, detail in changes), changes

