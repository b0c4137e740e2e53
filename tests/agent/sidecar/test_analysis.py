"""Window analysis on hand-written traces with known answers, on the real H200 fixtures,
and the interval helper under Hypothesis."""

from __future__ import annotations

import gzip
import json
import os
import time

import pytest
from hypothesis import given, strategies as st

from stepwatch.agent._sidecar import _intervals as iv
from stepwatch.agent._sidecar._analysis import summarize
from stepwatch.agent._sidecar._trace_model import TraceError

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "data", "traces")
FIXTURES = ["cuda_only_rank0", "cpu_cuda_rank0", "cuda_only_2gpu_rank0", "cuda_only_2gpu_rank1",
            "cpu_cuda_2gpu_rank0", "cpu_cuda_2gpu_rank1"]
US = 1e-6


# -- builders of Kineto-style events (times in microseconds) -------------------------------

def kernel(ts, dur, name, corr=None, stream=7, cat="kernel"):
    args = {"stream": stream, "device": 0}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": args}


def launch(ts, corr, tid=1):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": tid,
            "ts": ts, "dur": 0.5, "args": {"correlation": corr}}


def op(ts, dur, name, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur}


def note(ts, dur, name, tid=1):
    return op(ts, dur, name, tid, cat="user_annotation")


def trace(*events):
    return {"schemaVersion": 1, "traceEvents": list(events)}


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-15)


# -- hand-written traces -------------------------------------------------------------------

def test_cuda_only_overlapping_intervals():
    s = summarize(trace(kernel(0, 10, "a"), kernel(5, 15, "b", stream=9),
                        kernel(15, 25, "ncclDevKernel_AllReduce", stream=11),
                        kernel(50, 10, "Memcpy DtoD", cat="gpu_memcpy")),
                  steps=2, short_kernel_s=12e-6)
    assert s.span_s == approx(60 * US)
    assert s.gpu_busy_ratio == approx(50 / 60) and s.gpu_idle_ratio == approx(10 / 60)
    assert (s.compute_s, s.communication_s, s.memcpy_s) == (approx(20 * US), approx(25 * US),
                                                            approx(10 * US))
    assert s.overlap_ratio == approx(5 / 25)
    assert (s.kernel_count, s.gpu_event_count) == (3, 4)
    assert s.short_kernel_ratio == approx(1 / 3)
    assert [(k.name, k.count) for k in s.top_kernels] == [
        ("ncclDevKernel_AllReduce", 1), ("b", 1), ("a", 1)]
    assert not s.top_ops, "no CPU activity, no ops"
    b = s.breakdown
    assert b.step_time_s == approx(30 * US)
    assert (b.forward_s, b.backward_s, b.optimizer_s) == (0, 0, 0)
    assert b.communication_s == approx(10 * US), "comm [20,40) not under other work, per step"
    assert b.other_s == approx(20 * US)


def cpu_cuda_trace():
    """One ProfilerStep [0,100) on the main thread (tid 1) plus an autograd thread (tid 2)."""
    return trace(
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 2, "args": {"name": "pt_autograd_0"}},
        note(0, 100, "ProfilerStep#7"),
        note(1, 29, "## forward ##"), op(2, 18, "aten::linear"), op(3, 7, "aten::addmm"),
        launch(4, 1), launch(21, 2),
        op(31, 2, "aten::zero_"), launch(32, 3),
        note(60, 30, "Optimizer.step#SGD.step"), op(61, 9, "aten::add_"), launch(62, 5),
        launch(150, 7),
        op(40, 15, "autograd::engine::evaluate_function: MmBackward0", tid=2),
        op(41, 9, "aten::mm", tid=2), launch(42, 4, tid=2),
        note(50.5, 2.5, "nccl:all_reduce", tid=2), launch(51, 6, tid=2),
        kernel(10, 10, "gemm", 1), kernel(20, 5, "relu", 2),
        kernel(34, 2, "Memset (Device)", 3, cat="gpu_memset"),
        kernel(45, 20, "gemm", 4), kernel(52, 28, "ncclKernel_AllReduce", 6, stream=13),
        kernel(70, 5, "adam", 5), kernel(200, 10, "late", 7))


def test_cpu_cuda_nested_ops_phases_and_span():
    s = summarize(cpu_cuda_trace())
    assert s.span_s == approx(70 * US), "GPU projection of the ProfilerStep: [10, 80)"
    assert (s.gpu_event_count, s.kernel_count) == (6, 5), "the late kernel is outside"
    assert s.gpu_busy_ratio == approx(52 / 70)
    assert (s.compute_s, s.communication_s, s.memcpy_s) == (approx(40 * US), approx(28 * US),
                                                            approx(2 * US))
    assert s.overlap_ratio == approx(18 / 28)
    assert [(o.name, round(o.seconds / US, 6), o.count) for o in s.top_ops] == [
        ("nccl:all_reduce", 28, 1), ("aten::mm", 20, 1), ("aten::addmm", 10, 1),
        ("## forward ##", 5, 1), ("aten::add_", 5, 1), ("aten::zero_", 2, 1)]
    assert [(k.name, k.count) for k in s.top_kernels][:2] == [("gemm", 2), ("ncclKernel_AllReduce", 1)]
    b = s.breakdown
    assert b.step_time_s == approx(70 * US)
    # GPU idle [25,34) and [36,45): the host was in "## forward ##" until 30 (5 us charged to
    # forward) and on the autograd thread from 40 (5 us to backward); [30,34) + [36,40) stay other.
    assert b.forward_s == approx(22 * US), "gemm+relu [10,25), the memset under the step, idle [25,30)"
    assert b.backward_s == approx(25 * US), "gemm [45,65) and idle [40,45)"
    assert b.optimizer_s == approx(5 * US)
    assert b.communication_s == approx(10 * US), "[65,70) and [75,80)"
    assert b.other_s == approx(8 * US), "idle while the host was in no phase"
    assert (b.forward_gpu_s, b.backward_gpu_s, b.optimizer_gpu_s) == (
        approx(17 * US), approx(20 * US), approx(5 * US)), "GPU work alone: no idle charged"


def test_top_k_bounds_lists():
    s = summarize(cpu_cuda_trace(), top_k=2)
    assert len(s.top_ops) == 2 and len(s.top_kernels) == 2


def test_cpu_only_trace_uses_host_timeline():
    s = summarize(trace(
        note(0, 100, "ProfilerStep#1"), note(100, 100, "ProfilerStep#2"),
        note(10, 30, "## forward ##"), op(12, 18, "aten::mm"), op(15, 5, "aten::add"),
        op(50, 30, "autograd::engine::evaluate_function: MmBackward0"),
        note(85, 10, "Optimizer.step#SGD.step"), note(110, 20, "## forward ##")))
    assert (s.gpu_event_count, s.kernel_count, s.gpu_busy_ratio, s.gpu_idle_ratio) == (0, 0, 0, 0)
    assert s.span_s == approx(200 * US)
    b = s.breakdown
    assert b.step_time_s == approx(100 * US)
    assert (b.forward_s, b.backward_s, b.optimizer_s) == (approx(25 * US), approx(15 * US),
                                                         approx(5 * US))
    assert b.other_s == approx(55 * US)
    assert [(o.name, round(o.seconds / US, 6)) for o in s.top_ops] == [
        ("autograd::engine::evaluate_function: MmBackward0", 30), ("aten::mm", 13),
        ("aten::add", 5)], "CPU self time"


def test_plain_model_forward_is_the_operators_before_backward():
    """No "forward" annotation (a plain model(x)): operators directly under a ProfilerStep that
    start before its first backward range are forward; the DataLoader's record_function range,
    an operator after backward (loss.item()) and the optimizer's are not. A step without
    backward (evaluation) is all forward; a step with an explicit forward range keeps only it."""
    s = summarize(trace(
        note(0, 100, "ProfilerStep#1"), note(100, 100, "ProfilerStep#2"), note(200, 100, "ProfilerStep#3"),
        note(2, 6, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"), op(3, 4, "aten::stack"),
        op(10, 20, "aten::linear"), op(12, 15, "aten::addmm"), op(32, 8, "aten::mse_loss"),
        op(45, 30, "autograd::engine::evaluate_function: AddmmBackward0"),
        op(76, 4, "aten::item"), note(85, 10, "Optimizer.step#SGD.step"), op(86, 5, "aten::add_"),
        op(110, 30, "aten::linear"),                      # step 2: evaluation, no backward
        note(205, 20, "## forward ##"), op(206, 10, "aten::linear"), op(230, 10, "aten::mse_loss"),
        op(250, 20, "autograd::engine::evaluate_function: AddmmBackward0")))
    b = s.breakdown
    assert b.forward_s == approx((20 + 8 + 30 + 20) / 3 * US)
    assert b.backward_s == approx(50 / 3 * US) and b.optimizer_s == approx(10 / 3 * US)


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
def test_plain_cpu_model_forward_from_a_real_profiler_trace(tmp_path):
    """torch.profiler on CPU, an nn.Sequential with an extra matmul in forward: the forward
    phase carries it (it used to land in "other")."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(320, 256), torch.randn(320, 1)),
                                       batch_size=32)
    w = torch.randn(256, 256)

    def run(extra: int):
        path = tmp_path / f"t{extra}.json"
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    schedule=torch.profiler.schedule(wait=0, warmup=1, active=6),
                                    on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
            for x, y in data:
                for _ in range(extra):
                    x = torch.tanh(x @ w)
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
        return summarize(str(path)).breakdown

    # (alternated three times, the least of each phase kept: a busy machine slowing one run of
    # the plain model made every phase of it look longer than the heavy one's; with 40 extra
    # products a CPU burner beside the suite still slowed both plain runs by more than they add)
    runs = [run(extra) for extra in (0, 160, 0, 160, 0, 160)]
    fields = ("forward_s", "backward_s", "optimizer_s", "other_s")
    plain, heavy = ({f: min(getattr(b, f) for b in runs[i::2]) for f in fields} for i in (0, 1))
    assert plain["forward_s"] > 0
    grew = {f: heavy[f] - plain[f] for f in fields}
    assert max(grew, key=grew.get) == "forward_s", grew


def test_cpu_only_trace_compute_and_collectives_on_the_host():
    """CPU training: compute is operator time inside the steps (the c10d op and anything outside
    a step left out), communication the collectives on any thread (gloo runs them on its own)."""
    s = summarize(trace(
        op(-50, 20, "aten::randn"),  # before the profiled steps: not compute
        note(0, 100, "ProfilerStep#1"), note(100, 100, "ProfilerStep#2"),
        op(10, 30, "aten::mm"), op(15, 5, "aten::add"),  # nested: counted once
        op(50, 30, "autograd::engine::evaluate_function: MmBackward0"),
        op(82, 4, "c10d::allreduce_"),
        note(84, 40, "gloo:all_reduce", tid=9), note(150, 10, "gloo:all_reduce", tid=9),
        op(130, 20, "aten::mm")))
    assert s.compute_s == approx(80 * US)
    assert s.communication_s == approx(52 * US), "[82, 124) and [150, 160)"


def test_bad_input_raises_trace_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"{not json")
    with pytest.raises(TraceError):
        summarize(str(bad))
    with pytest.raises(TraceError):
        summarize({"no": "events"})
    truncated = tmp_path / "t.json.gz"
    truncated.write_bytes(gzip.compress(b'{"traceEvents": []}')[:-6])
    with pytest.raises(TraceError):
        summarize(str(truncated))
    with pytest.raises(OSError):
        summarize(str(tmp_path / "missing.json"))


def test_empty_trace_is_all_zero():
    s = summarize(trace())
    assert s.gpu_event_count == 0 and s.span_s == 0 and not s.top_ops


# -- real fixtures -------------------------------------------------------------------------

@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_parts_add_up(name):
    s = summarize(os.path.join(TRACES, name + ".json.gz"), steps=3)
    b = s.breakdown
    parts = b.forward_s + b.backward_s + b.optimizer_s + b.communication_s + b.other_s
    assert parts == pytest.approx(b.step_time_s, rel=1e-9)
    assert b.step_time_s == pytest.approx(s.span_s / 3)
    assert s.gpu_event_count > 400 and 0 < s.gpu_busy_ratio < 1
    assert s.gpu_busy_ratio + s.gpu_idle_ratio == pytest.approx(1)
    assert len(s.top_kernels) == 10 and s.analysis_s > 0
    if name.startswith("cuda_only"):
        assert (b.forward_s, b.backward_s, b.optimizer_s) == (0, 0, 0) and not s.top_ops
    else:
        assert min(b.forward_s, b.backward_s, b.optimizer_s) > 0
        names = [o.name for o in s.top_ops]
        assert "aten::mm" in names and not any(n.startswith("ProfilerStep") for n in names)
        # the phases hold the GPU work launched in them, plus the GPU idle time during which
        # the host was inside them (these small fixture jobs are launch-bound)
        busy, idle = (s.compute_s + s.memcpy_s) / 3, s.gpu_idle_ratio * s.span_s / 3
        assert 0.98 * busy <= b.forward_s + b.backward_s + b.optimizer_s <= busy + idle
    if "2gpu" in name:
        assert s.communication_s > 0 and any("nccl" in k.name.lower() for k in s.top_kernels)


def test_ten_megabyte_trace_is_fast(tmp_path):
    """A ~10 MB trace (the cpu_cuda fixture repeated 7 times, shifted in time) in well under
    a second on an idle core; the bound is loose because CI machines are shared."""
    with gzip.open(os.path.join(TRACES, "cpu_cuda_2gpu_rank0.json.gz")) as f:
        base = json.load(f)
    events = []
    for k in range(7):
        for ev in base["traceEvents"]:
            ev = dict(ev)
            if isinstance(ev.get("ts"), (int, float)):
                ev["ts"] += k * 30_000.0
            if isinstance(ev.get("args"), dict) and "correlation" in ev["args"]:
                ev["args"] = dict(ev["args"], correlation=ev["args"]["correlation"] + k * 10**6)
            events.append(ev)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(dict(base, traceEvents=events)))
    began = time.perf_counter()
    s = summarize(str(path))
    took = time.perf_counter() - began
    print(f"\n{path.stat().st_size / 1e6:.1f} MB analysed in {took:.3f} s")
    assert path.stat().st_size > 9e6 and s.kernel_count == 7 * 477
    assert took < 5.0


# -- interval helper -------------------------------------------------------------------------

intervals = st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 30)).map(
    lambda p: (p[0], p[0] + p[1])), max_size=30)


def covered(merged, x):
    return any(s <= x < e for s, e in merged)


@given(intervals)
def test_union_is_sorted_disjoint_and_covers_the_same_points(ivs):
    merged = iv.union(ivs)
    assert all(s < e for s, e in merged)
    assert all(a[1] < b[0] for a, b in zip(merged, merged[1:])), "disjoint, not touching"
    for x in range(-51, 82):
        for point in (x, x + 0.5):
            assert covered(merged, point) == any(s <= point < e for s, e in ivs)
    total = iv.length(merged)
    assert total <= sum(e - s for s, e in ivs)
    assert total >= max((e - s for s, e in ivs), default=0)
    assert iv.union(merged) == merged, "idempotent"


@given(intervals, intervals)
def test_intersection_and_subtraction_lengths(a, b):
    ua, ub = iv.union(a), iv.union(b)
    both = iv.length(iv.intersection(ua, ub))
    assert both == iv.length(ua) + iv.length(ub) - iv.length(iv.union(ua + ub))
    assert iv.subtract_length(ua, ub) == iv.length(ua) - both
    assert iv.intersection(ua, ub) == iv.union(iv.intersection(ua, ub))


@given(intervals, st.integers(-60, 60), st.integers(0, 60))
def test_clip_keeps_only_the_window(ivs, lo, width):
    merged = iv.union(ivs)
    clipped = iv.clip(merged, lo, lo + width)
    assert all(lo <= s < e <= lo + width for s, e in clipped)
    assert iv.length(clipped) == iv.length(iv.intersection(merged, [(lo, lo + width)]))
