"""On a CUDA GPU: a job that captures its whole step into a CUDA graph runs with the agent
attached (its optimizer step hook and phase-time hooks fire during the capture and must leave
the capture alone), and counts the warm-up steps and one step per replay (agent.step() after
each), with the capture said once as a ``cuda_graph_capture`` event."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from _recorded_job import run_recorded_job  # noqa: E402

REPLAYS = 300


def test_a_whole_step_cuda_graph_is_captured_and_replayed_with_the_agent(collector_factory, tmp_path):
    col, truth, read = run_recorded_job(collector_factory, tmp_path, "cuda_graph_job.py", "graphs",
                                        str(REPLAYS), STEPWATCH_PHASE_BUDGET="0.1")
    total = truth["warmup_steps"] + truth["replays"]
    col.wait_value("stepwatch_steps_total", total, training_job="graphs", rank=0)
    events = [e for batch in read() for e in batch.events]
    kinds = [e.kind for e in events]
    print(f"\nsteps {total}, events {kinds}, losses {truth['losses'][:3]}...")
    assert kinds.count("cuda_graph_capture") == 1, kinds
    assert all(x == x for x in truth["losses"])  # replays ran and produced numbers
