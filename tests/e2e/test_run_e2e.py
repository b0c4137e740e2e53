"""``stepwatch run`` end to end: an unmodified script under torchrun (2 gloo processes) with
spawned DataLoader workers reports ranks 0 and 1 under a readable job name to a real collector;
neither the torchrun launcher nor any worker gets an agent (exactly two streams)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

import _slurm
from _procs import Collector, assert_done, run_gloo_job

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)


def wait_steps(col, ranks: int, steps: int) -> dict:
    """``{(job, rank): steps_total}`` once ``ranks`` ranks reported ``steps`` each (or after 30 s)."""
    got: dict = {}
    for _ in range(150):
        got = {(x.labels["training_job"], int(x.labels["rank"])): x.value for x in col.samples()
               if x.name == "stepwatch_steps_total"}
        if len(got) == ranks and all(v == steps for v in got.values()):
            break
        time.sleep(0.2)
    return got


def test_stepwatch_run_profiles_an_unmodified_torchrun_job(tmp_path):
    col = Collector(tmp_path).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}
        env.update(STEPWATCH_SPOOL_DIR=str(tmp_path / "spool"), STEPWATCH_FLUSH_INTERVAL_S="0.2", OMP_NUM_THREADS="1")
        run = subprocess.run([os.path.join(BIN, "stepwatch"), "run", "--collector", col.grpc, "--",
                              os.path.join(BIN, "torchrun"), "--standalone", "--nproc_per_node=2",
                              os.path.join(HERE, "unmodified_job.py")],
                             env=env, capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
        # (torch's gloo teardown abort after both ranks printed "done" is not stepwatch's)
        assert_done(run, 2)
        assert run.stdout.count("done") == 2
        # rank 0 says where it reports, once; rank 1 says nothing
        said = [line for line in (run.stdout + run.stderr).splitlines() if "stepwatch: reporting job" in line]
        assert len(said) == 1 and "(rank 0 of 2) to collector " + col.grpc in said[0], said
        steps = wait_steps(col, 2, 100)
        names = {job for job, _ in steps}
        assert len(names) == 1 and re.fullmatch(r"unmodified_job-[0-9a-f]{8}", names.pop()), steps
        assert sorted(rank for _, rank in steps) == [0, 1]
        assert all(v == 100 for v in steps.values()), steps  # every step, the first included
        assert col.value("stepwatch_collector_streams_total") == 2  # no launcher, no worker
    finally:
        col.kill()


_BLOCKER = """import importlib.abc, sys


class _NoCollectorExtra(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("prometheus_client", "grpc_health"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, _NoCollectorExtra())
"""


def agent_only_python(tmp_path) -> str:
    """An interpreter that sees this environment's packages but the collector extra's
    (prometheus-client, grpcio-health-checking), as a training image installed without the
    extra: a venv whose .pth adds this site-packages, then blocks those two imports (in every
    process it starts too: the trainer, its sidecar, torchrun's workers)."""
    import sysconfig

    venv = tmp_path / "agent-only"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "_no_collector_extra.py").write_text(_BLOCKER)
    here = sysconfig.get_paths()["purelib"]
    (site / "zz_stepwatch_test.pth").write_text(f"import site; site.addsitedir({here!r}); import _no_collector_extra\n")
    return str(venv / "bin" / "python")


def test_the_agent_side_runs_without_the_collector_extra(tmp_path):
    """pyproject's ``collector`` extra holds what only the collector needs: without it, ``stepwatch
    run`` profiles a torchrun job to a real collector (run with the extra), and the commands
    that need it say how to install it (exit 2) instead of a traceback."""
    py = agent_only_python(tmp_path)
    blocked = subprocess.run([py, "-c", "import prometheus_client"], capture_output=True, text=True, timeout=60)
    assert blocked.returncode == 1 and "No module named 'prometheus_client'" in blocked.stderr
    col = Collector(tmp_path).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}
        env.update(STEPWATCH_SPOOL_DIR=str(tmp_path / "spool"), STEPWATCH_FLUSH_INTERVAL_S="0.2", OMP_NUM_THREADS="1")
        run = subprocess.run([py, "-m", "stepwatch.collector.tools", "run", "--collector", col.grpc, "--",
                              py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                              os.path.join(HERE, "unmodified_job.py")],
                             env=env, capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
        aborted = assert_done(run, 2)  # (as above)
        assert aborted or "Traceback" not in run.stderr, run.stderr[-3000:]
        steps = wait_steps(col, 2, 100)
        assert sorted(rank for _, rank in steps) == [0, 1] and all(v == 100 for v in steps.values()), steps
    finally:
        col.kill()
    for command in ("collector", "demo", "replay"):
        refused = subprocess.run([py, "-m", "stepwatch.collector.tools", command, *(["x.jsonl"] if command == "replay" else [])],
                                 capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
        assert refused.returncode == 2, (command, refused.stderr)
        assert refused.stderr.strip() == (
            f"stepwatch {command}: this install lacks prometheus-client, grpcio-health-checking (the collector "
            "side's packages); install them with: pip install 'stepwatch[collector]'"), refused.stderr


def test_stepwatch_run_without_a_command_is_a_usage_error():
    run = subprocess.run([os.path.join(BIN, "stepwatch"), "run", "--"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "no command given" in run.stderr
    run = subprocess.run([os.path.join(BIN, "stepwatch"), "run", "--", "no-such-program-xyz"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 127 and "cannot run 'no-such-program-xyz'" in run.stderr


def test_a_script_that_attaches_itself_is_not_attached_twice(tmp_path):
    col = Collector(tmp_path).start()
    try:
        script = tmp_path / "own_attach.py"
        script.write_text("import torch\nfrom stepwatch import agent\nagent.attach(job='own')\n"
                          "m = torch.nn.Linear(4, 4); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                          "for _ in range(20):\n    m(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}
        env.update(STEPWATCH_SPOOL_DIR=str(tmp_path / "spool"), STEPWATCH_FLUSH_INTERVAL_S="0.2")
        run = subprocess.run([os.path.join(BIN, "stepwatch"), "run", "--collector", col.grpc, "--",
                              sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "called twice" not in run.stderr, run.stderr
        col.wait_value("stepwatch_steps_total", 20, training_job="own", rank=0)
        assert col.value("stepwatch_collector_streams_total") == 1
    finally:
        col.kill()


def _spawn_ranks(col, tmp_path, cmd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPWATCH_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    env.update(STEPWATCH_SPOOL_DIR=str(tmp_path / "spool"), STEPWATCH_FLUSH_INTERVAL_S="0.2", OMP_NUM_THREADS="1",
               STEPWATCH_COLLECTOR=col.grpc, STEPWATCH_JOB="spawned")
    run = run_gloo_job(cmd, env, ranks=2, restart=lambda: (col.kill(), col.start()), cwd=str(tmp_path))
    assert "done 0" in run.stdout and "done 1" in run.stdout, run.stdout
    steps = {}
    for _ in range(150):
        steps = {int(x.labels["rank"]): x.value for x in col.samples()
                 if x.name == "stepwatch_steps_total" and x.labels["training_job"] == "spawned"}
        if steps.get(0) == 60 and steps.get(1) == 60:
            break
        time.sleep(0.2)
    return steps, run


def test_mp_spawn_ranks_come_from_torch_distributed_when_attached_before_init(tmp_path):
    """attach() runs before init_process_group with no RANK anywhere: both processes start as
    rank 0; at the first step torch.distributed's rank wins and the sidecar reconnects."""
    col = Collector(tmp_path).start()
    try:
        steps, _ = _spawn_ranks(col, tmp_path, [sys.executable, os.path.join(HERE, "spawn_job.py"), "29731", "--attach"])
        assert steps == {0: 60, 1: 60}, steps  # every step under its own rank, none added up
        dup = [a for a in col.api("/api/alerts")["alerts"] if a["alertname"] == "StepwatchDuplicateRank"]
        assert not [a for a in dup if a["state"] == "firing"], dup
    finally:
        col.kill()


def test_stepwatch_run_reports_mp_spawn_workers(tmp_path):
    """Under ``stepwatch run`` the spawned processes are the trainers: they get the agent at
    their first optimizer step (torch.distributed is initialised by then)."""
    col = Collector(tmp_path).start()
    try:
        steps, run = _spawn_ranks(col, tmp_path, [os.path.join(BIN, "stepwatch"), "run", "--collector", col.grpc, "--",
                                                  sys.executable, os.path.join(HERE, "spawn_job.py"), "29733"])
        assert steps == {0: 60, 1: 60}, steps
        assert col.value("stepwatch_collector_streams_total") == 2, run.stderr[-2000:]  # the parent never steps
    finally:
        col.kill()


@pytest.mark.skipif(not _slurm.available(), reason="needs root and slurm-wlm + munge (Debian packages)")
def test_stepwatch_run_under_a_real_srun(tmp_path):
    """``stepwatch run -- srun -n 2 python script.py`` on a single-node SLURM cluster the test
    starts: both tasks report under the SLURM job's name (name-id), as ranks 0 and 1."""
    slurm = _slurm.Slurm(tmp_path / "slurm").start()
    col = Collector(tmp_path).start()
    try:
        env = {k: v for k, v in slurm.env.items() if not k.startswith(("STEPWATCH_", "RANK", "LOCAL_RANK"))}
        env.update(STEPWATCH_SPOOL_DIR=str(tmp_path / "spool"), STEPWATCH_FLUSH_INTERVAL_S="0.2", OMP_NUM_THREADS="1")
        try:
            run_gloo_job([os.path.join(BIN, "stepwatch"), "run", "--collector", col.grpc, "--",
                          "srun", "-n", "2", "-J", "swjob", sys.executable, os.path.join(HERE, "srun_job.py"),
                          "29735"], env, ranks=2, restart=lambda: (col.kill(), col.start()), cwd=str(tmp_path))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{slurm.logs()}") from None
        steps = wait_steps(col, 2, 50)
        assert sorted(rank for _, rank in steps) == [0, 1], steps
        (job,) = {job for job, _ in steps}
        assert re.fullmatch(r"swjob-\d+", job), steps
        assert all(v == 50 for v in steps.values()), steps
    finally:
        col.kill()
        slurm.stop()
