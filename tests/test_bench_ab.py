"""bench/agent_ab_real.py, the analysis behind the agent's A/B on real GPUs: from jobs' own
step clocks named as run_real_device.sh writes them, it must take each job's median after its
first 30 s and separate the agent's effect from a faster GPU and a slower round."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("agent_ab_real", os.path.join(ROOT, "bench", "agent_ab_real.py"))
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)


def _job(path, step_s, n=2000):
    # a first step ending just inside the 30 s left out, then steady steps
    json.dump({"step_s": [29.99] + [step_s] * n}, open(path, "w"))


def test_the_fit_separates_the_agent_from_the_gpu_and_the_round(tmp_path):
    gpu = {0: 1.0, 1: 1.004, 2: 0.997, 3: 1.002}
    rnd = {"g": 1.0, "x": 0.994}
    arms = {"g": ["default", "none", "none", "default"], "x": ["none", "default", "default", "none"]}
    for r, row in arms.items():
        for g, arm in enumerate(row):
            t = 0.048 * gpu[g] * rnd[r] * (1.01 if arm == "default" else 1.0)
            _job(tmp_path / f"h100g_{r}{g}_1_{arm}.steps.json", t)
    (tmp_path / "h100g_g0_1_default.log").write_text("not a steps file\n")
    rows = ab.load(str(tmp_path))
    assert len(rows) == 8 and {r["steps"] for r in rows} == {2000}  # the first step left out
    out = ab.fit(rows)
    assert out["effects_pct"]["default"] == pytest.approx(1.0, abs=1e-6)
    assert out["effects_pct"]["round x"] == pytest.approx(-0.6, abs=1e-6)
    assert out["effects_pct"]["gpu 1"] == pytest.approx(0.4, abs=1e-6)
    assert out["dof"] == 2 and out["se_pct"]["default"] == pytest.approx(0.0, abs=1e-6)


def test_no_steps_files_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["agent_ab_real.py", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        ab.main()
    assert "no <name>_<round><gpu>_<n>_<arm>.steps.json files in" in str(exc.value)


def test_blocks_and_around_show_when_in_the_job_an_arm_slows(tmp_path, monkeypatch, capsys):
    """An arm that is 2% slower only from step 1,000 on: its block fit says 0% before and +2%
    after, and the after/before ratio at step 1,000 reads +2% for it and 0% for the other."""
    for r, row in {"a": ["default", "none"], "b": ["none", "default"]}.items():
        for g, arm in enumerate(row):
            base = 0.048 * (1.003 if g else 1.0)
            late = base * (1.02 if arm == "default" else 1.0)
            steps = [base] * 1000 + [late] * 1500
            json.dump({"step_s": steps}, open(tmp_path / f"x_{r}{g}_1_{arm}.steps.json", "w"))
    rows = ab.load(str(tmp_path))
    early = ab.fit(ab.block(rows, 200, 900))
    later = ab.fit(ab.block(rows, 1100, 2400))
    assert early["effects_pct"]["default"] == pytest.approx(0.0, abs=1e-6)
    assert later["effects_pct"]["default"] == pytest.approx(2.0, abs=1e-6)
    ratios = ab.around(rows, 1000)
    assert ratios["default"] == pytest.approx([1.02, 1.02]) and ratios["none"] == pytest.approx([1.0, 1.0])
    monkeypatch.setattr("sys.argv", ["agent_ab_real.py", str(tmp_path), "--blocks", "200:900,1100:2400",
                                     "--around", "1000"])
    ab.main()
    text = capsys.readouterr().out
    assert "(steps 1100 to 2400, 4 jobs" in text and "| 1000 | default | 1.0200, 1.0200 | +2.00% |" in text
    with pytest.raises(SystemExit) as exc:
        ab.block(rows, 0, 9000)
    assert "fewer than 9000" in str(exc.value)
    monkeypatch.setattr("sys.argv", ["agent_ab_real.py", str(tmp_path), "--blocks", "200-900"])
    with pytest.raises(SystemExit) as exc:
        ab.main()
    assert "--blocks wants START:END" in str(exc.value)


def test_a_sequence_of_arms_separates_the_agent_from_a_host_that_drifts(tmp_path):
    """Arms one after the other on the same GPUs (ddp-arms), none / default alternated, while
    the host gets 1% faster each job: the fit of order + arm gives the drift and the arm apart;
    rank 0's clock of a DDP job (.steps.r0.json) and a plain list are both read."""
    for n, arm in enumerate(["none", "default", "none", "default"], start=1):
        t = 0.048 * (0.99 ** n) * (1.02 if arm == "default" else 1.0)
        path = tmp_path / f"ab2_{n}_{arm}.steps.r0.json"
        json.dump([29.99] + [t] * 1500 if n % 2 else {"step_s": [29.99] + [t] * 1500}, open(path, "w"))
    _job(tmp_path / "h100g_a0_1_none.steps.json", 0.05)  # another design's file: not read
    rows = ab.load_sequence(str(tmp_path), "ab2")
    assert [(r["order"], r["arm"], r["steps"]) for r in rows] == [
        (1, "none", 1500), (2, "default", 1500), (3, "none", 1500), (4, "default", 1500)]
    out = ab.fit_sequence(rows)
    assert out["effects_pct"]["default"] == pytest.approx(2.0, abs=1e-6)
    assert out["effects_pct"]["order (per job)"] == pytest.approx(-1.0, abs=1e-6)
    assert out["dof"] == 1


def test_two_gpu_jobs_crossed_over_two_slots_are_read_from_rank_0(tmp_path):
    """A 4-GPU machine running two 2-GPU DDP jobs at once (slots 0 and 1), arms crossed over two
    rounds: --ddp reads each job's rank-0 clock (.steps.r0.json), never rank 1's, and the fit
    gives the arm apart from the slot and the round; without it those files are not read."""
    slot = {0: 1.0, 1: 1.01}
    rnd = {"a": 1.0, "b": 0.98}
    arms = {"a": ["none", "default"], "b": ["default", "none"]}
    for r, row in arms.items():
        for g, arm in enumerate(row):
            t = 0.046 * slot[g] * rnd[r] * (1.005 if arm == "default" else 1.0)
            _job(tmp_path / f"x2_{r}{g}_1_{arm}.steps.r0.json", t)
            _job(tmp_path / f"x2_{r}{g}_1_{arm}.steps.r1.json", 9.0)  # rank 1: never read
    rows = ab.load(str(tmp_path), ddp=True)
    assert len(rows) == 4 and all(r["file"].endswith(".steps.r0.json") for r in rows)
    out = ab.fit(rows)
    assert out["effects_pct"]["default"] == pytest.approx(0.5, abs=1e-6)
    assert out["effects_pct"]["gpu 1"] == pytest.approx(1.0, abs=1e-6)
    assert out["effects_pct"]["round b"] == pytest.approx(-2.0, abs=1e-6)
    assert ab.load(str(tmp_path)) == []
