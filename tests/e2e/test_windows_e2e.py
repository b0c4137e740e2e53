"""Profiler windows and trace capture end to end on CPU: trainer -> sidecar -> collector."""

from __future__ import annotations

import gzip
import json
import pathlib
import subprocess
import sys
import time
import urllib.request

from _procs import run_script, run_trainer, start_trainer, trainer_env

from stepwatch.collector.ingest._record import read_record


def windows_of(col, job):
    with urllib.request.urlopen(f"http://{col.http}/api/jobs/{job}/windows", timeout=10) as resp:
        return json.loads(resp.read())


def test_windows_produce_summaries_and_metrics(collector_factory, tmp_path):
    record = tmp_path / "record.jsonl"
    col = collector_factory("--record", str(record))
    env = trainer_env(tmp_path, col.grpc, "win", STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS=32,
                      STEPWATCH_OVERHEAD_BUDGET=0.5)
    run_trainer(env, "--steps", "200")
    col.wait_value("stepwatch_steps_total", 200, training_job="win")
    deadline = time.monotonic() + 30
    while True:
        ranks = windows_of(col, "win")["ranks"]
        got = ranks[0]["windows"] if ranks else []
        if len(got) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert len(got) >= 2, got
    w = got[-1]
    assert w["activities"] == "cpu" and w["last_step"] - w["first_step"] == 2
    assert w["gpu_event_count"] == 0 and w["top_ops"], w  # CPU run: ops by CPU self time
    assert 0 < w["breakdown"]["step_time_s"] < 5
    assert w["overhead_s"] > 0 and w["analysis_s"] > 0
    assert col.value("stepwatch_windows_total", training_job="win") >= 3  # incl. warm-up window
    ratio = col.value("stepwatch_agent_overhead_ratio", training_job="win")
    assert 0 < ratio < 0.5
    # The steps inside every window (warm-up, active, and the one paying for the export) are
    # marked on the wire, and the collector counts them apart from drift.
    profiled = {s.step for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"
                for s in ev.batch.steps if s.profiled}
    for win in got:
        assert set(range(win["first_step"], win["last_step"] + 2)) <= profiled, (win, sorted(profiled))
    assert len(profiled) < 200 // 2  # most steps are not profiled
    assert col.value("stepwatch_pauses_total", training_job="win", kind="profiler") == len(profiled)


def test_user_profiler_window_is_skipped_and_counted(collector_factory, tmp_path):
    col = collector_factory()
    script = tmp_path / "own_profiler.py"
    script.write_text(
        "import torch\n"
        "from stepwatch import agent\n"
        "agent.attach(windows='scheduled', window_every_steps=16, overhead_budget=0.5)\n"
        "m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "def step():\n"
        "    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "for _ in range(20): step()\n"
        "with torch.profiler.profile():\n"
        "    for _ in range(40): step()\n")
    env = trainer_env(tmp_path, col.grpc, "ownprof")
    run_script(script, env)
    col.wait_value("stepwatch_window_skips_total", 2, training_job="ownprof", reason="user_profiler")
    assert col.value("stepwatch_windows_total", training_job="ownprof") == 0


def test_trace_capture_on_command(collector_factory, tmp_path):
    col = collector_factory()
    trace_dir = tmp_path / "traces"
    env = trainer_env(tmp_path, col.grpc, "cap", STEPWATCH_WINDOWS=0, STEPWATCH_TRACE_DIR=trace_dir)
    trainer = start_trainer(env, "--steps", "400", "--step-sleep-s", "0.01")
    try:
        col.wait_value("stepwatch_agent_connected", 1, training_job="cap")
        out = tmp_path / "downloaded"
        run = subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "trace",
                              "--collector", col.grpc, "--job", "cap", "--steps", "3",
                              "--timeout", "60", "--out", str(out)], capture_output=True, text=True, timeout=90)
        assert run.returncode == 0, run.stdout + run.stderr
        line, saved = run.stdout.strip().splitlines()[-2:]
        path = line.split()[4]
        assert path.startswith(str(trace_dir)) and path.endswith("rank0.json.gz"), line
        events = json.load(gzip.open(path))["traceEvents"]
        assert sum(e.get("name", "").startswith("ProfilerStep#") for e in events) >= 3
        # The trace was uploaded to the collector: downloaded by `--out` and served over HTTP,
        # byte for byte the agent's archived file.
        trace_id = line.split("collector: /api/traces/")[1].strip()
        local = pathlib.Path(path).read_bytes()
        assert saved == f"rank 0  saved {out / (trace_id + '.json.gz')}", saved
        assert (out / f"{trace_id}.json.gz").read_bytes() == local
        with urllib.request.urlopen(f"http://{col.http}/api/traces/{trace_id}", timeout=10) as resp:
            assert resp.headers["Content-Type"] == "application/gzip" and resp.read() == local
        listed = col.api("/api/traces")
        assert [h["trace_id"] for h in listed["held"]] == [trace_id]
        assert listed["requests"][0]["traces"][0]["url"] == f"/api/traces/{trace_id}"
        assert col.value("stepwatch_collector_traces_stored_total") == 1
    finally:
        trainer.kill()
        trainer.wait()


def test_windows_print_nothing_on_the_trainers_stderr(collector_factory, tmp_path):
    """Kineto's per-window "USDT ... profiler_start/stop" lines are silenced by the agent (it
    sets KINETO_LOG_LEVEL unless the user did); the windows are still taken."""
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, "quiet", STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS=16,
                      STEPWATCH_OVERHEAD_BUDGET=0.5)
    env.pop("KINETO_LOG_LEVEL", None)
    run = run_trainer(env, "--steps", "120", "--d-model", "16", "--layers", "1")
    col.wait_value("stepwatch_steps_total", 120, training_job="quiet")
    deadline = time.monotonic() + 20
    while (col.value("stepwatch_windows_total", training_job="quiet") or 0) < 4:
        assert time.monotonic() < deadline, "no windows taken"
        time.sleep(0.2)
    assert "USDT" not in run.stderr and "profiler_start" not in run.stderr, run.stderr[-2000:]


def test_the_trainers_temporary_directory_is_removed_after_the_job(collector_factory, tmp_path):
    """Window traces are exported to a stepwatch-* directory under $TMPDIR; once the sidecar has
    analysed them and shut down, nothing is left there."""
    col = collector_factory()
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = trainer_env(tmp_path, col.grpc, "tmpclean", STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS=16,
                      STEPWATCH_OVERHEAD_BUDGET=0.5, TMPDIR=tmpdir)
    run_trainer(env, "--steps", "80")
    col.wait_value("stepwatch_steps_total", 80, training_job="tmpclean")
    assert col.value("stepwatch_windows_total", training_job="tmpclean") >= 2
    deadline = time.monotonic() + 20
    while list(tmpdir.glob("stepwatch-*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not list(tmpdir.glob("stepwatch-*")), list(tmpdir.rglob("*"))
