"""On a CUDA GPU: two optimizers stepped one after the other each iteration count one step per
iteration, and once the agent has learnt that the second one ends the iteration
(agent/_steps.py) the second one's step is timed in the optimizer phase of its own step (CUDA
events), not in the next step's data phase."""

from __future__ import annotations

import os
import pathlib
import statistics

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from _recorded_job import run_recorded_job  # noqa: E402

from stepwatch.proto.stepwatch.v1 import agent_pb2  # noqa: E402

ITERATIONS = 400


def test_the_last_optimizer_of_the_iteration_ends_the_step_on_cuda(collector_factory, tmp_path):
    col, truth, read = run_recorded_job(collector_factory, tmp_path, "optimizers_job.py", "optimizers",
                                        str(ITERATIONS), STEPWATCH_PHASE_BUDGET="0.01")
    col.wait_value("stepwatch_steps_total", ITERATIONS, training_job="optimizers", rank=0)
    batches = read()
    steps = {s.step: s for b in batches for s in b.steps}
    phases = [p for b in batches for p in b.phase_times if p.step > 20]
    trail = truth["trail_step_s"]
    data = statistics.median(p.data_s for p in phases) if phases else float("nan")
    opt = statistics.median(p.optimizer_s for p in phases) if phases else float("nan")
    table = (f"{len(steps)} steps for {truth['iterations']} iterations; {len(phases)} sampled after step 20 "
             f"({agent_pb2.StepClock.Name(phases[0].clock) if phases else '-'}): median data "
             f"{data * 1e3:.2f} ms, optimizer {opt * 1e3:.2f} ms; measured alone with synchronize: "
             f"lead step {truth['lead_step_s'] * 1e3:.2f} ms, trailing step {trail * 1e3:.2f} ms")
    print("\n" + table)
    if os.environ.get("OUT"):
        pathlib.Path(os.environ["OUT"], "optimizers_gpu.txt").write_text(table + "\n")
    assert len(steps) == truth["iterations"] == ITERATIONS
    assert len(phases) >= 30 and all(p.clock == agent_pb2.STEP_CLOCK_CUDA_EVENT for p in phases)
    for p in phases:  # the five phases sum to the step
        total = p.data_s + p.forward_s + p.backward_s + p.sync_s + p.optimizer_s
        assert total == pytest.approx(steps[p.step].duration_s, rel=1e-6, abs=1e-6)
    # The trailing optimizer's step is in the optimizer phase; the data phase holds only the
    # wait for the next batch (the leader ending the step would put the trailing step there).
    assert opt >= 0.7 * trail, table
    assert data < 0.3 * trail, table
