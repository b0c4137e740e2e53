"""On a CUDA GPU: a job that captures its whole step into a CUDA graph runs with the agent
attached (its optimizer step hook and phase-time hooks fire during the capture and must leave
the capture alone), and counts the warm-up steps and one step per replay (agent.step() after
each), with the capture said once as a ``cuda_graph_capture`` event."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from _procs import trainer_env  # noqa: E402

from stepwatch.collector.ingest._record import read_record  # noqa: E402

REPLAYS = 300


def test_a_whole_step_cuda_graph_is_captured_and_replayed_with_the_agent(collector_factory, tmp_path):
    record = tmp_path / "record.jsonl"
    col = collector_factory("--record", str(record))
    env = trainer_env(tmp_path, col.grpc, "graphs", STEPWATCH_PHASE_BUDGET="0.1")
    truth_path = tmp_path / "truth.json"
    run = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("cuda_graph_job.py")),
                          str(truth_path), str(REPLAYS)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    truth = json.loads(truth_path.read_text())
    total = truth["warmup_steps"] + truth["replays"]
    col.wait_value("stepwatch_steps_total", total, training_job="graphs", rank=0)
    events = [e for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"
              for e in ev.batch.events]
    kinds = [e.kind for e in events]
    print(f"\nsteps {total}, events {kinds}, losses {truth['losses'][:3]}...")
    assert kinds.count("cuda_graph_capture") == 1, kinds
    assert all(x == x for x in truth["losses"])  # replays ran and produced numbers
