"""Always-on phase times: real CPU training through the real hooks, and fake CUDA events that
show nothing is read before the GPU finished it."""

from __future__ import annotations

import statistics
import time

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from stepwatch.agent._dataloader import DataLoaderTimer
from stepwatch.agent._phase_times import PhaseTimer
from stepwatch.agent._steps import StepTracker

from test_steps import FakeCuda  # (pytest puts this folder on the path)


@pytest.fixture
def loop():
    """A real model, optimizer, DataLoader (timer installed) and tracker with a phase timer."""
    made = []

    def make(budget=1.0, cuda=None):
        out = []
        dl = DataLoaderTimer()
        dl.install()
        timer = PhaseTimer(dl, budget)
        tracker = StepTracker(out.append, dl, cuda, phases=timer)
        handle = register_optimizer_step_post_hook(lambda o, a, k: tracker.on_optimizer_step(o))
        made.append((dl, handle))
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = torch.utils.data.DataLoader(torch.randn(4096, 16), batch_size=8)
        return out, timer, model, opt, data

    yield make
    for dl, handle in made:
        handle.remove()
        dl.uninstall()


def train(model, opt, data, steps, before_optimizer=0.0, in_forward=0.0):
    for i, x in enumerate(data):
        if i >= steps:
            break
        if in_forward:
            time.sleep(in_forward)
        model(x).pow(2).mean().backward()
        if before_optimizer:
            time.sleep(before_optimizer)
        opt.step()
        opt.zero_grad()


def phase_records(out):
    return [r for r in out if r["t"] == "phase_times"]


def test_every_point_is_seen_and_the_phases_sum_to_the_step(loop):
    out, timer, model, opt, data = loop()
    train(model, opt, data, 12, before_optimizer=0.02)
    phases, steps = phase_records(out), {r["step"]: r for r in out if r["t"] == "step"}
    # the first step has no boundary before it; the second learns which gradients come first and last
    assert [p["step"] for p in phases] == list(range(3, 13)), [p["step"] for p in phases]
    for p in phases:
        assert p["points"] == 0b1111 and p["clock"] == "host"
        total = sum(p[f"{k}_s"] for k in ("data", "forward", "backward", "sync", "optimizer"))
        assert total == pytest.approx(steps[p["step"]]["duration_s"], abs=1e-9)
        assert p["sync_s"] >= 0.02  # the sleep between backward and the step lands in sync
        assert p["sync_s"] == p["host_sync_s"]
    # ... and not in the optimizer phase: a tiny SGD step, far under the sleep (the median of ten,
    # so one step the loaded machine held back cannot decide: a fresh-clone run saw one 5.6 ms)
    assert statistics.median(p["optimizer_s"] for p in phases) < 0.02 <= min(p["sync_s"] for p in phases)
    assert 0 < timer.cost_s


def test_a_record_comes_before_its_step(loop):
    out, _, model, opt, data = loop()
    train(model, opt, data, 5)
    kinds = [(r["t"], r["step"]) for r in out if r["t"] in ("step", "phase_times")]
    for i, (t, step) in enumerate(kinds):
        if t == "phase_times":
            assert kinds[i + 1] == ("step", step)


def test_the_budget_bounds_how_many_steps_are_sampled_and_hooks_go_between(loop):
    out, timer, model, opt, data = loop(budget=1e-6)
    train(model, opt, data, 60)
    assert timer.sampled <= 2, timer.sampled  # the first sample's cost outweighs 1e-6 of a second
    for p in model.parameters():  # no hook left on the parameters while no step is sampled
        assert not getattr(p, "_post_accumulate_grad_hooks", None)


def test_a_failing_point_never_reaches_the_training_loop(loop):
    class Broken:
        def Event(self, enable_timing):
            raise RuntimeError("no events today")

    out, timer, model, opt, data = loop()
    train(model, opt, data, 3)
    timer.use_cuda(Broken())  # every point now fails inside the hooks
    train(model, opt, data, 5)  # backward and the optimizer step run as ever
    assert len([r for r in out if r["t"] == "step"]) == 8


def test_cuda_points_are_read_only_once_the_gpu_finished_the_step(loop):
    cuda = FakeCuda()
    out, timer, model, opt, data = loop(cuda=cuda)
    for i, x in enumerate(data):
        if i >= 6:
            break
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        assert not phase_records(out)  # nothing read while the events are pending
    # the GPU finishes everything: 1 ms per event in record order, read at the next boundary
    for k, ev in enumerate(cuda.events):
        ev.done, ev.t_ms = True, float(k)
    train(model, opt, data, 1)
    phases = phase_records(out)
    assert phases and all(p["clock"] == "cuda_event" and p["points"] == 0b1111 for p in phases)
    for p in phases:  # five events, 1 ms apart: each phase 1 ms
        assert [round(p[f"{k}_s"] * 1e3, 6) for k in ("data", "forward", "backward", "sync", "optimizer")] == [1.0] * 5


def test_explicit_steps_learn_the_optimizer_from_its_pre_hook():
    """agent.step() mode (the Hugging Face and Lightning callbacks): no optimizer at the
    boundary; the sampled step's pre-hook finds it, the next learns the gradient order."""
    out = []
    dl = DataLoaderTimer()
    dl.install()
    try:
        timer = PhaseTimer(dl, 1.0)
        tracker = StepTracker(out.append, dl, None, phases=timer)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i, x in enumerate(torch.utils.data.DataLoader(torch.randn(512, 16), batch_size=8)):
            if i >= 8:
                break
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            tracker.on_explicit_step(None, None)
    finally:
        dl.uninstall()
    phases = phase_records(out)
    assert phases and phases[-1]["points"] == 0b1111, phases


def test_gradient_accumulation_spans_the_micro_batches(loop):
    """Four micro-batches per optimizer step: forward is the first one's, backward runs from
    its first gradient to the last micro-batch's last gradient."""
    out, timer, model, opt, data = loop()
    it = iter(data)
    for _ in range(6):
        for micro in range(4):
            model(next(it)).pow(2).mean().backward()
            if micro < 3:
                time.sleep(0.003)  # host work between micro-batches: inside backward's span
        opt.step()
        opt.zero_grad()
    phases = phase_records(out)
    assert phases and all(p["points"] == 0b1111 for p in phases), phases
    assert all(p["backward_s"] >= 3 * 0.003 for p in phases), [p["backward_s"] for p in phases]


def test_several_optimizers_count_once_and_every_optimizers_step_is_in_the_optimizer_phase(loop):
    """Two optimizers, each over half the model, stepped one after the other: one step per
    iteration. From the third iteration the tracker knows the second optimizer ends each
    iteration (agent/_steps.py), so its step (slowed here by 20 ms) is in the optimizer phase of
    its own step, not in the next step's data phase. Every point is seen and the phases sum to
    the step."""
    out, timer, model, _, data = loop()
    first = torch.optim.SGD(model[0].parameters(), lr=0.01)
    second = torch.optim.SGD(model[2].parameters(), lr=0.01)
    slow = second.register_step_pre_hook(lambda o, a, k: time.sleep(0.02))
    try:
        for i, x in enumerate(data):
            if i >= 12:
                break
            model(x).pow(2).mean().backward()
            first.step()
            second.step()
            first.zero_grad()
            second.zero_grad()
    finally:
        slow.remove()
    steps = {r["step"]: r for r in out if r["t"] == "step"}
    assert len(steps) == 12, sorted(steps)
    phases = phase_records(out)
    assert len(phases) >= 8 and all(p["points"] == 0b1111 for p in phases), phases
    for p in phases:
        total = sum(p[f"{k}_s"] for k in ("data", "forward", "backward", "sync", "optimizer"))
        assert total == pytest.approx(steps[p["step"]]["duration_s"], abs=1e-9)
    late = [p for p in phases if p["step"] >= 4]
    assert len(late) >= 6, phases
    assert all(p["optimizer_s"] >= 0.02 for p in late), [p["optimizer_s"] for p in late]
    assert all(p["data_s"] < 0.01 for p in late), [p["data_s"] for p in late]


def test_a_compiled_model_keeps_its_one_graph_and_gets_every_point(loop):
    """torch.compile (AOTAutograd, the eager backend: no C compiler in CI): the gradient hooks sit
    on the parameters, outside the compiled graphs, and coming and going each sampled step they
    cause no recompilation."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    out, timer, model, opt, data = loop()
    compiled = torch.compile(model, backend="aot_eager")
    for i, x in enumerate(data):
        if i >= 12:
            break
        compiled(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    phases = phase_records(out)
    assert len(phases) >= 8 and all(p["points"] == 0b1111 for p in phases), phases
    assert counters["frames"]["ok"] == 1 and not counters["recompiles"], (dict(counters["frames"]),
                                                                          dict(counters["recompiles"]))


class _SlowBackward(torch.autograd.Function):
    """Identity whose backward sleeps: work at the top of backward, before any gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        time.sleep(0.02)
        return g


def test_work_at_the_top_of_backward_is_backward_and_backward_is_put_back(loop):
    out, timer, model, opt, data = loop()
    plain = torch.Tensor.backward
    for i, x in enumerate(data):
        if i >= 12:
            break
        _SlowBackward.apply(model(x)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    phases = phase_records(out)
    assert len(phases) >= 8, phases
    assert statistics.median(p["backward_s"] for p in phases) >= 0.02, phases
    assert statistics.median(p["forward_s"] for p in phases) < 0.02, phases
    # the wrapper exists only while a step is sampled (the next one is armed now); closing the
    # step puts the original back
    assert torch.Tensor.backward.__wrapped__ is plain
    timer.close()
    assert torch.Tensor.backward is plain


def test_backward_run_without_tensor_backward_still_has_its_point(loop):
    out, _, model, opt, data = loop()
    for i, x in enumerate(data):
        if i >= 8:
            break
        torch.autograd.backward(model(x).pow(2).mean())
        opt.step()
        opt.zero_grad()
    phases = phase_records(out)
    assert phases and all(p["points"] == 0b1111 for p in phases), phases


def test_a_point_reached_inside_a_cuda_graph_capture_drops_the_sample(loop):
    """The fourth iteration runs while the stream "captures a CUDA graph" (a whole-step capture):
    none of its points records an event (it would go into the user's graph), its boundary is
    no step, the step after it reports no phases (its sampling was dropped) and the ones after
    that are sampled again."""
    cuda = FakeCuda()
    out, timer, model, opt, data = loop(cuda=cuda)
    for i, x in enumerate(data):
        if i >= 9:
            break
        cuda.capturing = i == 3
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        cuda.capturing = False
        cuda.complete(float(i))
    assert cuda.violations == []
    steps = sorted(r["step"] for r in out if r["t"] == "step")
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 6, steps  # 8 steps run, the last pending
    sampled = sorted(p["step"] for p in phase_records(out))
    assert 4 not in sampled and [s for s in sampled if s > 4], sampled
    assert [s for s in sampled if s < 4], sampled


class _Loader:
    notify = None


def _sampled_steps(per_sample_s: float, aligned: bool, steps: int = 20000, step_s: float = 0.040,
                   budget: float = 1e-3) -> tuple:
    """One rank's phase timer on a simulated clock: steps of ``step_s``, each sampled step
    costing ``per_sample_s``; the steps it sampled (``aligned``: the tracker's step numbers
    given to ``arm``, as the tracker does) and the timer."""
    now = [0.0]
    timer = PhaseTimer(_Loader(), budget, clock=lambda: now[0])
    chosen = []
    for step in range(1, steps + 1):
        before = timer.sampled
        timer.arm(None, step if aligned else None)
        if timer.sampled > before:
            chosen.append(step)
            timer.add_cost(per_sample_s)
        timer.close()
        now[0] += step_s
    return chosen, timer


def test_ranks_sample_the_same_steps_so_the_job_pays_one_ranks_samples_not_the_sum():
    """Two data-parallel ranks in lockstep whose samples cost 0.35 and 0.42 ms (40 ms steps, the
    0.1% budget): each stays within the budget, the cheaper one samples more, and the steps the
    dearer one samples are (its first eight, taken by the budget alone, aside) all among the
    cheaper one's - the job's steps sampled on some rank are one rank's, not the sum. Each
    choosing its own steps by the budget alone (the rule before), the union is near the sum."""
    (a, ta), (b, tb) = _sampled_steps(0.35e-3, True), _sampled_steps(0.42e-3, True)
    for t in (ta, tb):
        assert t.cost_ratio() <= 1e-3, t.cost_ratio()
    assert 0.7 * 1e-3 * 0.040 / 0.42e-3 * 20000 <= len(b) < len(a), (len(a), len(b))  # ~90% of the budget's rate
    assert set(b[8:]) <= set(a), sorted(set(b[8:]) - set(a))[:10]
    union = set(a) | set(b)
    assert len(union) <= len(a) + 8, (len(union), len(a), len(b))
    gaps = [y - x for x, y in zip(a[8:], a[9:])]
    assert max(gaps) <= 2 * 20000 / len(a), max(gaps)  # spread evenly, not in bursts
    (a0, _), (b0, _) = _sampled_steps(0.35e-3, False), _sampled_steps(0.42e-3, False)
    assert len(set(a0) | set(b0)) > 1.5 * max(len(a0), len(b0)), (len(a0), len(b0), len(set(a0) | set(b0)))
