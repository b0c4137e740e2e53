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
