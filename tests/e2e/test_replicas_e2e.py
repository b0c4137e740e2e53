"""Two collector replicas, six single-rank jobs (real trainers, sidecars, gRPC on loopback):
each job lands on exactly one replica, chosen by rendezvous hashing of its name; when one
replica is killed its jobs go on on the other with no step lost."""

from __future__ import annotations

import json
import signal
import time

from _procs import start_trainer, trainer_env
from stepwatch.core.placement import Placement

STEPS = 160


def _six_jobs(targets: str) -> list:
    """Six job names, three placed on each replica. The replicas' ports are random, so six
    fixed names all land on one of two replicas in 2 x 2^-6 of runs (a CI run saw it); the
    names are drawn until each replica has three."""
    placement, per = Placement(targets), {}
    for i in range(1000):
        name = f"shard-{i}"
        chosen = per.setdefault(placement.choose(name), [])
        if len(chosen) < 3:
            chosen.append(name)
        if len(per) == 2 and all(len(v) == 3 for v in per.values()):
            return sorted(n for v in per.values() for n in v)
    raise AssertionError(f"rendezvous hashing put 1,000 names on {len(per)} replica(s)")


def _steps_in(record) -> dict:
    """{job: [step, ...]} of every batch applied, from a collector's --record file."""
    out: dict = {}
    for line in record.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:  # a line cut by SIGKILL
            continue
        if rec["kind"] == "batch":
            job = rec["hello"]["job"] if "hello" in rec else rec.get("job")
            out.setdefault(job, []).extend(int(st["step"]) for st in rec["batch"].get("steps", []))
    return out


def test_jobs_are_sharded_and_move_to_the_surviving_replica(collector_factory, tmp_path):
    records = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    cols = [collector_factory("--record", str(r), "--metrics-per-rank", "summary") for r in records]
    targets = ",".join(c.grpc for c in cols)
    JOBS = _six_jobs(targets)
    expect = {job: Placement(targets).choose(job) for job in JOBS}
    owner_of = {c.grpc: c for c in cols}
    assert set(expect.values()) == set(owner_of), "the six names should use both replicas"

    trainers = []
    for job in JOBS:
        env = trainer_env(tmp_path / job, targets, job)
        trainers.append(start_trainer(env, "--steps", str(STEPS), "--step-sleep-s", "0.06"))

    # Each job on exactly one replica: the one every rank computes.
    deadline = time.monotonic() + 120
    while True:
        seen = [c.job_steps() for c in cols]
        if all(seen[cols.index(owner_of[expect[j]])].get(j, 0) >= 30 for j in JOBS):
            break
        assert time.monotonic() < deadline, (seen, [t.poll() for t in trainers])
        time.sleep(0.2)
    for job in JOBS:
        on = [c.grpc for c, s in zip(cols, seen) if job in s]
        assert on == [expect[job]], (job, on, expect[job])

    victim, survivor = cols
    moved = [j for j in JOBS if expect[j] == victim.grpc]
    victim.kill(signal.SIGKILL)
    for t in trainers:
        out, _ = t.communicate(timeout=180)
        assert t.returncode == 0, out[-3000:]

    # The moved jobs go on on the survivor; every step of every job was applied somewhere.
    deadline = time.monotonic() + 60
    while any(survivor.job_steps().get(j, 0) < STEPS for j in JOBS):
        assert time.monotonic() < deadline, survivor.job_steps()
        time.sleep(0.2)
    before, after = _steps_in(records[0]), _steps_in(records[1])
    for job in JOBS:
        steps = set(before.get(job, [])) | set(after.get(job, []))
        assert steps == set(range(1, STEPS + 1)), (job, sorted(set(range(1, STEPS + 1)) - steps)[:10])
        if job in moved:
            assert before.get(job) and after.get(job), job  # on the victim first, then on the survivor
        else:
            assert not before.get(job), job  # never touched the victim
