"""StepTracker with fake clocks and fake CUDA events: boundaries, de-duplication, timing."""

from stepwatch.agent._dataloader import DataLoaderTimer
from stepwatch.agent._steps import StepTracker


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class FakeLoader(DataLoaderTimer):
    """The real timer, not installed: the test sets what ``take()`` returns."""

    @property
    def wait(self):
        return self._wait

    @wait.setter
    def wait(self, value):
        self._wait = value


class FakeEvent:
    """A CUDA event whose completion and GPU timestamp the test controls."""

    def __init__(self, gpu):
        self.gpu, self.t_ms, self.done = gpu, None, False

    def record(self, stream=None):
        if self.gpu.capturing:  # a record during a capture goes into the user's graph
            self.gpu.violations.append("record")
        self.gpu.events.append(self)

    def query(self):
        if self.gpu.capturing:  # a query during a CUDA-graph capture breaks it
            self.gpu.violations.append("query")
        self.gpu.queries += 1
        return self.done

    def elapsed_time(self, other):
        assert self.done and other.done, "elapsed_time on an incomplete event would synchronize"
        return other.t_ms - self.t_ms


class FakeCuda:
    def __init__(self):
        self.events, self.stats_calls, self.queries = [], [], 0
        self.capturing = False  # the current stream is capturing a CUDA graph
        self.violations = []    # event calls made while capturing (hooks swallow exceptions)

    def is_current_stream_capturing(self):
        return self.capturing

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def current_device(self):
        return 0

    def current_stream(self):
        return "stream 0"

    def get_device_properties(self, d):
        return type("P", (), {"total_memory": 80 << 30, "uuid": "abcd-1234", "name": "Fake GPU"})()

    def Event(self, enable_timing):
        assert enable_timing
        return FakeEvent(self)

    def memory_stats(self, device):
        self.stats_calls.append(device)
        return {"allocated_bytes.all.current": 10, "reserved_bytes.all.current": 20,
                "num_alloc_retries": 1, "num_ooms": 0}

    def complete(self, t_ms):
        """The GPU finishes every recorded event so far; the last at t_ms."""
        for i, ev in enumerate(e for e in self.events if not e.done):
            ev.done, ev.t_ms = True, t_ms


def make(cuda=None, **kw):
    out, clock, loader = [], FakeClock(), FakeLoader()
    tracker = StepTracker(out.append, loader, cuda, clock=clock, wall=clock, **kw)
    return tracker, out, clock, loader


def steps(out):
    return [r for r in out if r["t"] == "step"]


def test_host_clock_durations_and_dataloader_wait():
    tracker, out, clock, loader = make(samples_per_step=8)
    for i in range(3):
        clock.now += 0.5
        loader.wait, loader.batches = 0.1 * (i + 1), 1
        tracker.boundary()
    recs = steps(out)
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["duration_s"] for r in recs] == [0.5, 0.5, 0.5]
    assert [round(r["dataloader_wait_s"], 3) for r in recs] == [0.1, 0.2, 0.3]
    assert all(r["clock"] == "host" and r["samples"] == 8 and "tokens" not in r for r in recs)


def test_several_optimizers_count_one_step_each_iteration():
    tracker, out, clock, _ = make()
    opt_a, opt_b = object(), object()
    for _ in range(5):
        clock.now += 1
        tracker.on_optimizer_step(opt_a)
        tracker.on_optimizer_step(opt_b)
    assert tracker.steps == 5
    assert [r["step"] for r in steps(out)] == [1, 2, 3, 4, 5]


def test_with_several_optimizers_the_last_of_the_iteration_ends_the_step_once_learnt():
    """Each iteration: 1.0 s of forward/backward, the leader's step 0.1 s, the other's 0.3 s.
    The leader ends the first two steps; from the iteration where the same other optimizer is
    seen the second time, the step ends after it, so its 0.3 s is in the step it belongs to."""
    tracker, out, clock, _ = make()
    lead, other = object(), object()
    for _ in range(6):
        clock.now += 1.1
        tracker.on_optimizer_step(lead)
        clock.now += 0.3
        tracker.on_optimizer_step(other)
    durations = [round(r["duration_s"], 6) for r in steps(out)]
    # leader-ended: 1.1, 1.4; the learning iteration ends at the trailer (1.4 + 0.3); then 1.4 each
    assert durations == [1.1, 1.4, 1.7, 1.4, 1.4, 1.4], durations


def test_a_trailer_that_misses_an_iteration_is_forgotten():
    tracker, out, clock, _ = make()
    lead, other = object(), object()
    for _ in range(3):
        tracker.on_optimizer_step(lead)
        tracker.on_optimizer_step(other)
    n = tracker.steps
    for _ in range(4):  # the other optimizer is no longer stepped: from the second leader call
        tracker.on_optimizer_step(lead)  # on (the first cannot know yet), the leader ends steps
    assert tracker.steps == n + 3


def test_an_irregular_pattern_keeps_the_leader_ending_steps():
    """A discriminator stepped three times per generator step: the first seen (the
    discriminator) leads and every one of its steps ends a step, as before."""
    tracker, out, clock, _ = make()
    disc, gen = object(), object()
    for _ in range(5):
        for _ in range(3):
            tracker.on_optimizer_step(disc)
        tracker.on_optimizer_step(gen)
    assert tracker.steps == 15


def test_replaced_leader_optimizer_hands_over():
    tracker, out, clock, _ = make()
    old, new = object(), object()
    tracker.on_optimizer_step(old)
    for _ in range(4):  # `old` is gone; `new` fires alone from now on
        tracker.on_optimizer_step(new)
    assert tracker.steps == 4  # old once, then new takes over on its second call


def test_explicit_step_disables_hook_counting():
    tracker, out, clock, _ = make()
    opt = object()
    tracker.on_optimizer_step(opt)
    tracker.on_explicit_step(samples=4, tokens=None)
    tracker.on_optimizer_step(opt)
    tracker.on_explicit_step(samples=None, tokens=64)
    assert tracker.steps == 3
    assert steps(out)[1]["samples"] == 4 and steps(out)[2]["tokens"] == 64


def test_cuda_durations_only_after_query_and_without_sync():
    cuda = FakeCuda()
    tracker, out, clock, _ = make(cuda)
    clock.now += 1
    tracker.boundary()  # step 1: event 1 recorded, not complete
    assert steps(out) == []
    cuda.complete(1000.0)
    clock.now += 1
    tracker.boundary()  # step 2 recorded; step 1 completes -> host clock (no previous event)
    assert [(r["step"], r["clock"]) for r in steps(out)] == [(1, "host")]
    cuda.complete(1035.0)  # GPU says step 2 took 35 ms
    clock.now += 0.2
    tracker.boundary()
    rec = steps(out)[1]
    assert rec["step"] == 2 and rec["clock"] == "cuda_event" and abs(rec["duration_s"] - 0.035) < 1e-12
    gpu = [r for r in out if r["t"] == "gpu"][0]
    assert gpu["uuid"] == "GPU-abcd-1234" and gpu["total_memory_bytes"] == 80 << 30


def test_memory_stats_at_most_once_per_interval():
    cuda = FakeCuda()
    tracker, out, clock, _ = make(cuda, memory_stats_interval_s=1.0)
    for _ in range(50):  # 50 steps in 5 s
        clock.now += 0.1
        tracker.boundary()
    assert 4 <= len(cuda.stats_calls) <= 6
    alloc = [r for r in out if r["t"] == "alloc"][0]
    assert alloc["allocated_bytes"] == 10 and alloc["reserved_bytes"] == 20 and alloc["alloc_retries"] == 1
    assert alloc["device_total_bytes"] == 80 << 30


def test_silent_hook_watchdog_counts_batches_without_a_boundary():
    """The real DataLoader wrapper calls on_silent once when batches keep coming with no
    step boundary; the limit (64) grows to 8x the batches of an accumulating step."""
    import torch
    from torch.utils.data import DataLoader

    calls = []
    timer = DataLoaderTimer(on_silent=calls.append)
    assert timer.install()
    try:
        tracker = StepTracker(lambda r: None, timer, None)
        data = DataLoader(torch.arange(1000), batch_size=1)
        it = iter(data)
        for _ in range(12):
            next(it)
        tracker.boundary()  # 12 batches per step: the limit becomes 96
        assert timer.silent_after == 96
        for _ in range(95):
            next(it)
        assert calls == []
        next(it)
        assert calls == [96]
        for _ in range(200):
            next(it)
        assert calls == [96]  # once
    finally:
        timer.uninstall()


def test_phase_marks_reach_the_steps_they_overlap():
    tracker, out, clock, loader = make()
    loader.batches = 1
    tracker.boundary()                       # step 1: ordinary
    tracker.mark("checkpoint")
    tracker.mark("log")                      # the first mark of a step wins
    tracker.boundary()                       # step 2: checkpoint
    tracker.open_phase("eval")
    tracker.boundary()                       # step 3: a boundary inside the open pause
    tracker.open_phase("inner")              # nested: the outermost names the steps
    tracker.close_phase()
    tracker.close_phase()
    tracker.boundary()                       # step 4: the pause ended in it
    tracker.boundary()                       # step 5: ordinary again
    assert [r.get("phase") for r in steps(out)] == [None, "checkpoint", "eval", "eval", None]
    tracker.close_phase()                    # an unmatched close is harmless
    tracker.boundary()
    assert "phase" not in steps(out)[-1]


def test_a_boundary_inside_a_cuda_graph_capture_is_no_step_and_touches_no_event():
    """Whole-step CUDA graphs: the optimizer step hook fires while the step is captured. That
    boundary records no event, queries none (either would break the user's capture), samples
    no memory and counts no step; it is said once in an event. Steps before and after count."""
    cuda = FakeCuda()
    tracker, out, clock, _ = make(cuda)
    for _ in range(3):  # warm-up iterations, as before any capture
        clock.now += 0.05
        tracker.boundary()
    recorded, queried, stats = len(cuda.events), cuda.queries, len(cuda.stats_calls)
    cuda.capturing = True
    clock.now += 0.05
    tracker.boundary()
    tracker.boundary()
    assert (len(cuda.events), cuda.queries, len(cuda.stats_calls)) == (recorded, queried, stats)
    assert cuda.violations == []
    assert tracker.steps == 3 and tracker.graph_captures == 2
    events = [r for r in out if r["t"] == "event"]
    assert [e["kind"] for e in events] == ["cuda_graph_capture"] and "agent.step()" in events[0]["message"]
    cuda.capturing = False
    cuda.complete(500.0)
    clock.now += 2
    tracker.boundary()  # an explicit agent.step() after a replay: a step again
    assert tracker.steps == 4 and len(cuda.events) == recorded + 1
