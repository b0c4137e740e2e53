"""bench/phase_sampled_cost.py: from a job's own step clock and the collector's recording of it,
the median of the steps that carried phase times against the others, profiled steps and the
first 30 s left out."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os

import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))  # as when run from bench/: its agent_ab_real
spec = importlib.util.spec_from_file_location("phase_sampled_cost", os.path.join(ROOT, "bench", "phase_sampled_cost.py"))
pc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pc)


def _job(folder, name, sampled_slower=1.02):
    steps, batches = [], []
    for n in range(1, 3001):
        sampled, profiled = n % 5 == 0, n in (1500, 1501)
        s = 0.040 * (sampled_slower if sampled else 1.0) * (3.0 if profiled else 1.0)
        steps.append(s)
        batches.append({"kind": "batch", "batch": {
            "steps": [dict({"step": str(n)}, **({"profiled": True} if profiled else {}))],
            "phase_times": [{"step": str(n)}] if sampled else []}})
    json.dump({"step_s": steps}, open(folder / f"{name}.steps.json", "w"))
    with gzip.open(folder / f"{name}.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"kind": "connect"}) + "\n")
        for b in batches:
            fh.write(json.dumps(b) + "\n")


def test_the_sampled_steps_cost_is_read_from_the_two_sources(tmp_path, capsys):
    _job(tmp_path, "a_default")
    json.dump({"step_s": [0.04] * 100}, open(tmp_path / "b_none.steps.json", "w"))  # no recording: skipped
    row = pc.job(str(tmp_path / "a_default.steps.json"))
    assert row["diff_pct"] == pytest.approx(2.0) and row["share"] == pytest.approx(0.2, abs=0.01)
    step_s, t, settled = json.load(open(tmp_path / "a_default.steps.json"))["step_s"], 0.0, 0
    for s in step_s:
        t += s
        settled += t > 30.0
    assert row["sampled"] + row["others"] == settled - 2  # after 30 s of the job's clock, two profiled out
    pc.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "| a_default |" in out and "b_none" not in out and "(1 jobs)" in out


def test_nothing_to_read_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit) as exc:
        pc.main([str(tmp_path)])
    assert "no job with both its steps file and a recording" in str(exc.value)


def test_a_recording_alone_gives_each_ranks_step_times_against_the_steps_sampled_on_any_rank(tmp_path, capsys):
    """Two lockstep ranks: rank 0 samples every 10th step, rank 1 every 10th + 5; each rank's
    sampled-on-either steps are 2% longer. Read from the recording's own step durations."""
    path = tmp_path / "ddp.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        for n in range(1, 2001):
            slow = n % 10 in (0, 5)
            for rank in (0, 1):
                mine = n % 10 == (0 if rank == 0 else 5)
                fh.write(json.dumps({"kind": "batch", "rank": rank, "batch": {
                    "steps": [{"step": n, "duration_s": 0.040 * (1.02 if slow else 1.0)}],
                    "phase_times": [{"step": n}] if mine else []}}) + "\n")
    rows = pc.recording_jobs(str(path))
    assert [r["job"] for r in rows] == ["ddp rank 0", "ddp rank 1"]
    for r in rows:
        assert r["diff_pct"] == pytest.approx(2.0) and r["share"] == pytest.approx(0.2, abs=0.01), r
        assert r["local_pct"] == pytest.approx(2.0), r
    pc.main([str(path)])
    assert "| ddp rank 1 |" in capsys.readouterr().out
