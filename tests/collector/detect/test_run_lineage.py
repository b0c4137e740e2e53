"""A job compared with its own earlier runs (collector/detect/_lineage.py), on real recordings
replayed as consecutive runs of one job through the collector's pipeline, with a collector
restart between the runs (a new Detection on the same state directory)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import pathlib
import sqlite3

import pytest

from stepwatch.collector._replay import replay
from stepwatch.collector.alerting import Detection
from stepwatch.collector.detect import DetectionConfig, RunIdentity, RunStore
from stepwatch.collector.detect._lineage import Lineage
from stepwatch.collector.detect._persist import DriftStore
from stepwatch.collector.tools.corpus import events, first_step_time, inject, load, rerun

REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"
CFG = DetectionConfig()
RUN_REGRESSION = "StepwatchRunRegression"


def _play(lines, directory, drift_state=False):
    """Replay ``lines`` into a fresh collector (Detection) on ``directory``: (alerts, detection)."""
    store = DriftStore(str(directory)) if drift_state else None
    runs = RunStore(str(directory))
    det = Detection(CFG, log_changes=False, runs=runs, store=store)
    alerts = replay(events(lines), CFG, detection=det)
    # (the stores' writers flush every second of the collector's time; a replay takes less)
    runs.flush()
    if store is not None:
        store.flush()
    return alerts, det


def _second(first, path, ratio=0.0, **hello):
    """``path`` replayed as the next run of ``first``'s job, a minute after it ended, slowed by
    ``ratio`` from its first step."""
    lines = rerun(load(str(REAL / path)), max(o["time"] for o in first) + 60, "second-run",
                  job=first[0]["hello"]["job"], **hello)
    return inject(lines, "step", ratio, first_step_time(lines) - 1, 0) if ratio else lines


@pytest.fixture(scope="module")
def h200q(tmp_path_factory):
    return load(str(REAL / "h200q_1gpu_m.jsonl.gz"))


def test_a_resume_that_came_back_slower_is_raised_once_with_what_changed(h200q, tmp_path):
    """The same 12-layer bf16 job on an H200, resumed 8% slower on another host with another
    torch: one StepwatchRunRegression, within 2 minutes of the second run settling, with the
    levels of both runs and what differs between them."""
    _play(h200q, tmp_path)
    second = _second(h200q, "h200q_1gpu_m2.jsonl.gz", 0.08, host="gpu-node-22", torch_version="2.12.0")
    alerts, det = _play(second, tmp_path)
    reg = [a for a in alerts if a.alertname == RUN_REGRESSION]
    assert len(reg) == 1 and reg[0].state == "firing", [(a.alertname, a.state, a.fired_summary) for a in alerts]
    settled = first_step_time(second) + CFG.drift.warmup_s + CFG.drift.settle_s
    assert 0 <= reg[0].fired_at - settled <= 120, reg[0].fired_at - settled
    text = reg[0].fired_summary
    assert text.startswith("this run settled 7.9% slower than the run of 2026-11-30 02:23 UTC (40.3 -> 43.5 ms/step"), text
    assert text.endswith("changed: host vm -> gpu-node-22, torch 2.11.0+cu130 -> 2.12.0"), text
    assert reg[0].evidence["against"] == h200q[0]["hello"]["session_id"] and reg[0].decided == "runs"
    runs = det.engine.lineage.runs(h200q[0]["hello"]["job"])
    assert [r["run"] for r in runs] == [h200q[0]["hello"]["session_id"], "second-run"]
    assert runs[0]["ended_at"] is not None and runs[1]["regression"] and runs[1]["live"]


def test_an_unchanged_resume_is_recorded_never_raised(h200q, tmp_path):
    _play(h200q, tmp_path)
    alerts, det = _play(_second(h200q, "h200q_1gpu_m2.jsonl.gz"), tmp_path)
    assert alerts == [], [(a.alertname, a.fired_summary) for a in alerts]
    runs = det.engine.lineage.runs(h200q[0]["hello"]["job"])
    assert len(runs) == 2 and 0.97 < runs[1]["compared"]["ratio"] < 1.03 and not runs[1]["regression"]


def test_a_faster_resume_is_recorded_never_raised(h200q, tmp_path):
    first = inject(h200q, "step", 0.08, first_step_time(h200q) - 1, 0)
    _play(first, tmp_path)
    alerts, det = _play(_second(first, "h200q_1gpu_m2.jsonl.gz"), tmp_path)
    assert alerts == [], [(a.alertname, a.fired_summary) for a in alerts]
    runs = det.engine.lineage.runs(h200q[0]["hello"]["job"])
    assert runs[1]["compared"]["ratio"] < 0.95 and not runs[1]["regression"], runs[1]["compared"]


def test_a_job_name_reused_by_another_batch_size_starts_a_new_lineage(tmp_path):
    """Two real 2-GPU DDP jobs of one name, batch 8 then batch 6 (tokens per step 8192 -> 6144):
    the second, even made 8% slower, is never compared with the first."""
    first = load(str(REAL / "h200e_2gpu_m_a.jsonl.gz"))
    _play(first, tmp_path)
    alerts, det = _play(_second(first, "h200e_2gpu_m_b.jsonl.gz", 0.08), tmp_path)
    assert not [a for a in alerts if a.alertname == RUN_REGRESSION]
    runs = det.engine.lineage.runs(first[0]["hello"]["job"])
    assert [r["tokens_per_step"] for r in runs] == [8192, 6144] and runs[1]["compared"] is None
    assert runs[1]["settled_step_s"] and sorted(runs[1]["ranks"]) == ["0", "1"]


def test_a_reused_name_never_restores_another_runs_level(tmp_path):
    """The state_dir poisoning case: "victim" runs a launch-bound ~12 ms job, the collector
    restarts, then a ~40 ms job starts under the same name. Its ranks learn their own level:
    nothing is raised at its start (restoring the old level paged +200% from step 101)."""
    small = rerun(load(str(REAL / "h100c_1gpu_s.jsonl.gz")), 1.8e9, "attacker", job="victim")
    _play(small, tmp_path, drift_state=True)
    big = rerun(load(str(REAL / "h200q_1gpu_m.jsonl.gz")), max(o["time"] for o in small) + 36 * 60, "real",
                job="victim")
    alerts, det = _play(big, tmp_path, drift_state=True)
    assert alerts == [], [(a.alertname, a.fired_summary) for a in alerts]
    assert 0.039 < det.engine.drift_of("victim", 0).settled()[0] < 0.042


def test_a_restart_inside_one_run_keeps_that_runs_level_and_run(h200q, tmp_path):
    """The same sessions reconnect after the collector restarted: the rank is armed again at
    once (its level restored) and its run goes on (one run, not two)."""
    cut = first_step_time(h200q) + 300
    before = [o for o in h200q if o["time"] < cut and o["kind"] != "disconnect"]
    after = [o for o in h200q if o["kind"] == "connect"] + [o for o in h200q if o["time"] >= cut]
    _play(before, tmp_path, drift_state=True)
    det = Detection(CFG, log_changes=False, runs=RunStore(str(tmp_path)), store=DriftStore(str(tmp_path)))
    alerts = replay(events(after[:5]), CFG, detection=det)
    assert alerts == [] and det.engine.armed() == {(h200q[0]["hello"]["job"], 0): True}
    assert len(det.engine.lineage.runs(h200q[0]["hello"]["job"])) == 1


# -- the store -------------------------------------------------------------------------------------
def _ident(session, host="n1", world=1, tokens="8192"):
    return RunIdentity(session=session, world=world, host=host, settings=(("tokens_per_step", tokens),))


def _level(values):
    return lambda job, rank: values.get(rank)


def test_a_damaged_run_store_logs_once_and_the_lineage_goes_on_in_memory(tmp_path, caplog):
    (tmp_path / "detection.sqlite").write_bytes(b"this is not a database" * 100)
    caplog.set_level(logging.ERROR, "stepwatch.collector")
    lin = Lineage(RunStore(str(tmp_path)))
    for k, level in enumerate((0.040, 0.044)):
        lin.hello("j", 0, _ident(f"s{k}"), 1000.0 * k)
        lin.tick(1000.0 * k + 200, _level({0: (level, 0.01)}))
    assert [c.alertname for c in lin.conditions("j")] == [RUN_REGRESSION]
    assert len([r for r in caplog.records if "run records" in r.getMessage()]) == 1, caplog.records


def test_a_read_only_state_dir_logs_once_and_the_lineage_goes_on(tmp_path, caplog):
    lin = Lineage(RunStore(str(tmp_path)))
    lin.hello("j", 0, _ident("s0"), 0.0)
    lin.tick(200.0, _level({0: (0.040, 0.01)}))
    lin.store.close()  # (the collector stops: what it held is written)
    os.chmod(tmp_path / "detection.sqlite", 0o400)
    os.chmod(tmp_path, 0o500)
    try:
        caplog.set_level(logging.ERROR, "stepwatch.collector")
        lin2 = Lineage(RunStore(str(tmp_path)))
        lin2.hello("j", 0, _ident("s1"), 1000.0)
        lin2.hello("j", 0, _ident("s2"), 2000.0)
        lin2.tick(2200.0, _level({0: (0.046, 0.01)}))
    finally:
        os.chmod(tmp_path, 0o700)
        os.chmod(tmp_path / "detection.sqlite", 0o600)
    if os.geteuid() != 0:  # (root writes through a read-only mode)
        assert len([r for r in caplog.records if "run records" in r.getMessage()]) == 1
    assert [c.alertname for c in lin2.conditions("j")] == [RUN_REGRESSION]


def test_a_slower_rank_is_named_and_only_the_newest_runs_are_kept(tmp_path):
    store = RunStore(str(tmp_path), keep=3)
    lin = Lineage(store)
    for k in range(5):
        for rank in range(4):
            lin.hello("j", rank, _ident(f"s{k}-{rank}", host=f"node{rank + (4 if k == 4 else 0)}", world=4),
                      1000.0 * k)
        slow = {3: 1.15} if k == 4 else {}
        lin.tick(1000.0 * k + 200, _level({r: (0.040 * slow.get(r, 1.0), 0.005) for r in range(4)}))
    c = lin.conditions("j")
    assert len(store.runs("j")) == 3
    assert not c, "the median rank did not move: the job's level is the same"
    comp = lin.runs("j")[-1]["compared"]
    assert comp["rank"] == 3 and comp["rank_host"] == "node7", comp


def _writer(directory, job, n):
    store = RunStore(directory)
    lin = Lineage(store)
    for k in range(n):
        lin.hello(job, 0, _ident(f"{job}-{k}"), float(k))
        lin.tick(float(k) + 0.5, _level({0: (0.04, 0.01)}))
        if k % 7 == 0:
            store.flush()  # (as its writer thread does: some rows while the other replica writes too)
    store.close()


def test_two_replicas_sharing_the_directory_do_not_corrupt_it(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), f"job{i}", 30)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    db = sqlite3.connect(str(tmp_path / "detection.sqlite"))
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT job, count(*) FROM runs GROUP BY job ORDER BY job").fetchall() == [("job0", 30),
                                                                                                ("job1", 30)]


def test_a_new_run_under_a_name_the_collector_still_holds_learns_its_own_level(tmp_path):
    """The same case without a restart: the collector still holds the ~12 ms job's rank (its
    grace has not passed) when the ~40 ms job connects under the same name and rank."""
    small = rerun(load(str(REAL / "h100c_1gpu_s.jsonl.gz")), 1.8e9, "attacker", job="victim")
    det = Detection(CFG, log_changes=False, runs=RunStore(str(tmp_path)))
    replay(events(small), CFG, detection=det)
    assert ("victim", 0) in det.engine.rank_keys()
    big = rerun(load(str(REAL / "h200q_1gpu_m.jsonl.gz")), max(o["time"] for o in small) + 60, "real", job="victim")
    alerts = [a for a in replay(events(big), CFG, detection=det) if a.fired_at >= big[0]["time"]]
    assert alerts == [], [(a.alertname, a.fired_summary) for a in alerts]
    assert 0.039 < det.engine.drift_of("victim", 0).settled()[0] < 0.042


# -- where users look: a real collector on loopback, real gRPC -------------------------------------
def _stream(running, lines):
    """Send a recording's batches to a running collector over real gRPC, housekeeping on the
    data clock every eval_interval_s as the live timer would."""
    from collector_testlib import AckStream as Stream  # (one agent stream that waits for each ack)

    from stepwatch.proto.stepwatch.v1 import agent_pb2

    evs = list(events(lines))
    col, clock = running.collector, running.clock
    next_tick = evs[0].time
    with running.channel() as chan:
        stream = None
        for ev in evs:
            while ev.time >= next_tick:
                clock.now = next_tick
                running.loop.call(_housekeeping(col))
                next_tick += CFG.eval_interval_s
            clock.now = ev.time
            if ev.kind == "connect":
                stream = Stream(chan, agent_pb2.AgentMessage(hello=ev.hello))
            elif ev.kind == "batch":
                stream.send(ev.batch)
        stream.close()
    running.loop.call(_housekeeping(col))


async def _housekeeping(col):
    col.housekeeping()


def test_runs_are_served_on_the_api_the_command_line_top_and_metrics_across_a_restart(
        h200q, start_collector, tmp_path, capsys):
    import json

    from stepwatch.collector.tools import main
    from stepwatch.collector.tools import top

    first = start_collector(state_dir=str(tmp_path / "state"))
    _stream(first, h200q)
    first.loop.call(first.collector.stop(grace_s=0))  # the collector restarts between the runs
    second_run = _second(h200q, "h200q_1gpu_m2.jsonl.gz", 0.08, host="gpu-node-22")
    running = start_collector(state_dir=str(tmp_path / "state"))
    _stream(running, second_run[:-1])  # (the second run is still live)
    job = h200q[0]["hello"]["job"]
    status, _, body = running.get(f"/api/jobs/{job}/runs")
    doc = json.loads(body)
    assert status == 200 and [r.get("live", False) for r in doc["runs"]] == [False, True]
    brief = json.loads(running.get(f"/api/jobs/{job}/runs?ranks=0")[2])["runs"]
    assert [r["hosts"] for r in brief] == [["vm"], ["gpu-node-22"]] and not any("ranks" in r for r in brief), brief
    assert doc["runs"][1]["regression"] and doc["runs"][1]["compared"]["changed"] == ["host vm -> gpu-node-22"]
    assert json.loads(running.get("/api/jobs/nobody/runs")[2]) == {"job": "nobody", "runs": []}
    summary = json.loads(running.get("/api/jobs?summary=1")[2])["jobs"][0]["run"]
    assert summary["regression"] and 1.07 < summary["ratio"] < 1.09, summary
    metrics = running.get("/metrics")[2].decode()
    assert f'stepwatch_run_level_ratio{{training_job="{job}"}} 1.07' in metrics
    alerts = json.loads(running.get("/api/alerts")[2])["alerts"]
    assert [a["alertname"] for a in alerts if a["state"] == "firing"] == [RUN_REGRESSION]
    http = running.collector.http_address
    assert main(["history", job, "--http", http]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("STARTED (UTC)") and len(lines) == 4, out
    assert "live" in lines[2] and "+7.9%!" in lines[2] and "gpu-node-22" in lines[2], out
    assert "changed: host vm -> gpu-node-22" in lines[3], out
    assert main(["history", "nobody", "--http", http]) == 2
    table = top.render(top.read(http))
    assert f"{job[:24]:<24} run from" in table and "+7.9% vs the run of" in table and "REGRESSION" in table, table


def test_a_gpu_learnt_after_the_hello_is_in_the_record_and_in_what_changed():
    lin = Lineage(RunStore(None))
    for k, gpu in enumerate(("NVIDIA H100 80GB HBM3", "NVIDIA H200")):
        lin.hello("j", 0, _ident(f"s{k}"), 1000.0 * k)
        lin.gpu("j", 0, gpu)
        lin.tick(1000.0 * k + 200, _level({0: (0.040 * (1.1 if k else 1.0), 0.01)}))
    assert lin.runs("j")[0]["ranks"]["0"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert lin.runs("j")[1]["compared"]["changed"] == ["GPU NVIDIA H100 80GB HBM3 -> NVIDIA H200"]


def test_a_lock_held_by_another_process_never_stalls_a_run_save_and_writing_resumes(tmp_path):
    store = RunStore(str(tmp_path), thread=False, lock_wait_s=0.05, read_wait_s=0.02)
    other = sqlite3.connect(str(tmp_path / "detection.sqlite"), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    for k in range(3):
        store.save({"job": "j", "run": f"r{k}", "started_at": float(k)})
    assert [r["run"] for r in store.runs("j")] == ["r0", "r1", "r2"]  # held, answered from memory
    assert store.flush() is False and store.failures >= 1  # (the read under the lock counted too)
    other.execute("ROLLBACK")
    assert store.flush() is True
    assert other.execute("SELECT run FROM runs WHERE job = 'j' ORDER BY started_at").fetchall() == [("r0",), ("r1",), ("r2",)]
    assert [r["run"] for r in RunStore(str(tmp_path), thread=False).runs("j")] == ["r0", "r1", "r2"]
    other.close()
    store.close()


class _CountingStore(RunStore):
    """A run store that counts the rank entries of every record it is given."""

    def __init__(self):
        super().__init__(None)
        self.entries = 0

    def save(self, record: dict) -> None:
        self.entries += len(record["ranks"])
        super().save(record)


def test_a_large_job_s_start_builds_its_run_record_once_a_tick_not_once_a_rank():
    """A run's record is O(ranks): made at each rank's Hello, a 3,000-rank job's start built 4.5
    million rank entries on the event loop (22.6 s, bench/results/run_record_start_2core.md). The
    ranks that joined are written at the next tick, together; the record then holds every rank
    (a collector restart resumes the run with them all)."""
    store = _CountingStore()
    lineage = Lineage(store)
    n = 2000
    for rank in range(n):
        lineage.hello("big", rank, RunIdentity(session=f"s{rank}", world=n, host=f"node-{rank // 8}"), 1000.0)
    assert store.entries <= 1  # (the run's start: its first rank)
    lineage.tick(1001.0, lambda job, rank: None)
    assert store.entries <= 1 + n  # one record of every rank, not one per Hello (n * n / 2 before)
    (rec,) = store.runs("big")
    assert len(rec["ranks"]) == n and rec["ended_at"] is None
    lineage.tick(1002.0, lambda job, rank: None)
    assert store.entries <= 1 + n  # (nothing joined since: written again only a minute later)
    # a rank of this run that says Hello again is a reconnect; a new session on a held rank a new run
    assert not lineage.hello("big", 5, RunIdentity(session="s5", world=n), 1003.0)
    assert lineage.hello("big", 5, RunIdentity(session="again", world=n), 1004.0)


def test_the_records_of_ended_runs_share_what_their_ranks_said_alike():
    """Each Hello's texts and settings are new objects; a run's record kept them per rank: 5.7 KB a
    rank with an agent's 40 settings, 285 MB for the 50 runs kept of a 1,000-rank job (in memory
    without a state_dir; bench/results/run_record_start_2core.md). Equal texts and settings are
    one object, a record holds one settings dict for the ranks that share them, and an ended run's
    record is held as compressed JSON."""
    import tracemalloc

    config = {f"setting_{k}": f"value of setting {k} for this job" for k in range(40)}
    store, n = RunStore(None), 300

    def ident(run, rank):  # (fresh objects, as each Hello's are)
        return RunIdentity(session=f"r{run}s{rank}", world=n, host="".join(("node-", str(rank // 8))),
                           torch="".join(("2.11.", "0")), settings=tuple(sorted((k + "", v + "") for k, v in config.items())))

    lineage = Lineage(store)
    lineage.hello("big", 0, ident(-1, 0), 0.0)  # (first use)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for run in range(4):
            for rank in range(n):
                lineage.hello("big", rank, ident(run, rank), 1000.0 * run + 1)
            lineage.tick(1000.0 * run + 2, lambda job, rank: None)
            for rank in range(n):
                lineage.left("big", rank)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    records = [r for r in store.runs("big") if r["run"] != "r-1s0"]
    assert len(records) == 4 and all(len(r["ranks"]) == n and r["ended_at"] is not None for r in records)
    assert records[0]["ranks"]["7"]["settings"] == config and records[0]["ranks"]["7"]["torch"] == "2.11.0"
    # an ended run's record is held compressed: ~43 bytes a rank's entry (~640 as a dict that
    # shares its texts and settings; 5.7 KB before they were shared)
    assert grown / (4 * n) < 200, f"{grown / (4 * n):.0f} bytes a rank's entry"
    for rank in range(n):  # the live run's record holds one settings dict for the ranks that share them
        lineage.hello("big", rank, ident(9, rank), 9001.0)
    live = [r for r in lineage.runs("big") if r.get("live")][0]
    assert live["ranks"]["7"]["settings"] == config and live["ranks"]["7"]["settings"] is live["ranks"]["8"]["settings"]


@pytest.mark.parametrize("on_disk", [False, True])
def test_an_ended_run_held_compressed_reads_back_whole_and_is_written_whole(tmp_path, on_disk):
    """An ended run's record is held as compressed JSON: ``runs`` and ``one`` give it back equal to
    what was saved, ``runs(ranks=False)`` its brief record without decompressing, and the store's file
    (with a state_dir) gets the whole record; a live run's record is held as the dict it is."""
    store = RunStore(str(tmp_path) if on_disk else None, thread=False)
    ranks = {str(k): {"session": f"s{k}", "host": f"node-{k // 8}", "settings": {"a": "1"}, "first_step": 3,
                      "settled_s": 0.04, "noise": 0.01} for k in range(64)}
    ended = {"v": 1, "job": "j", "run": "r1", "started_at": 10.0, "ended_at": 99.0, "settled_step_s": 0.04,
             "world_size": 64, "ranks": ranks}
    live = dict(ended, run="r2", started_at=100.0, ended_at=None)
    store.save(ended)
    store.save(live)
    assert store.runs("j") == [ended, live]
    assert store.runs("j", ranks=False)[0] == dict({k: v for k, v in ended.items() if k != "ranks"}, rank_count=64,
                                                   hosts=[f"node-{k}" for k in range(8)], torch=[""])
    assert store.runs("j", ranks=False)[1] is live
    assert store.one("j", "r1") == ended and store.one("j", "nope") is None
    if on_disk:
        assert store.flush()
        rows = dict(sqlite3.connect(store.path).execute("SELECT run, record FROM runs").fetchall())
        assert json.loads(rows["r1"]) == ended and json.loads(rows["r2"]) == live
        assert store.runs("j") == [ended, live] and store.one("j", "r1") == ended  # (read from the file now)
    store.close()


def test_a_brief_list_of_runs_has_their_hosts_and_rank_counts_not_their_ranks():
    """``Lineage.runs(job, ranks=False)`` (``/api/jobs/<job>/runs?ranks=0``, the page and
    ``stepwatch history``): every run, ended (held compressed) or live, without its per-rank
    entries, with its rank count and distinct hosts and torch versions; the whole list still has
    them."""
    lin = Lineage(RunStore(None))
    for k in range(2):
        for rank in range(16):
            lin.hello("j", rank, RunIdentity(session=f"r{k}s{rank}", world=16, host=f"node-{rank // 8 + 2 * k}",
                                             torch="2.11.0"), 1000.0 * k)
        lin.tick(1000.0 * k + 1, lambda job, rank: None)
        if k == 0:
            for rank in range(16):
                lin.left("j", rank)
    ended, live = lin.runs("j", ranks=False)
    assert "ranks" not in ended and "ranks" not in live and live["live"] and ended["ended_at"] is not None
    assert (ended["rank_count"], ended["hosts"], ended["torch"]) == (16, ["node-0", "node-1"], ["2.11.0"])
    assert (live["rank_count"], live["hosts"]) == (16, ["node-2", "node-3"])
    whole = lin.runs("j")
    assert [len(r["ranks"]) for r in whole] == [16, 16] and whole[0]["ranks"]["9"]["host"] == "node-1"


def test_a_job_that_restarted_while_the_collector_did_takes_its_first_rank_back_into_its_new_run(tmp_path):
    """The stored record lacks rank 1 (it joined less than a tick before the collector was
    killed); meanwhile the job restarted. Rank 1 comes back first under a new session and is
    resumed into the stored run (it may be that run's, as in the test below); rank 0 then comes
    back under a new session too: the job restarted, and rank 1, which joined the resumed run
    under a session its record lacked, moves with it into the new run. The old run keeps only
    what it had. Once a rank of the stored record came back under its own session, the run went on
    and the ranks that joined it are its own: a later restart leaves them there."""
    store = RunStore(str(tmp_path))
    lineage = Lineage(store)
    assert lineage.hello("j", 0, _ident("s0", world=2), 1000.0)
    assert not lineage.hello("j", 1, _ident("s1", world=2), 1000.5)  # (written at the next tick: none came)
    store.flush()

    store = RunStore(str(tmp_path))
    lineage = Lineage(store)
    assert not lineage.hello("j", 1, _ident("t1", world=2), 1010.0)  # first back: resumed, for now
    assert lineage.hello("j", 0, _ident("t0", world=2), 1010.4)       # the job restarted
    lineage.tick(1011.0, _level({}))
    store.flush()
    old, new = RunStore(str(tmp_path)).runs("j")
    assert (old["run"], sorted(old["ranks"]), old["ended_at"] is not None) == ("s0", ["0"], True), old
    assert (new["run"], sorted(new["ranks"]), new["ended_at"]) == ("t0", ["0", "1"], None), new
    assert new["ranks"]["1"]["session"] == "t1", new["ranks"]

    store = RunStore(str(tmp_path / "b"))
    lineage = Lineage(store)
    assert lineage.hello("k", 0, _ident("s0", world=2), 1000.0)
    assert not lineage.hello("k", 1, _ident("s1", world=2), 1000.5)
    store.flush()
    store = RunStore(str(tmp_path / "b"))
    lineage = Lineage(store)
    assert not lineage.hello("k", 1, _ident("s1", world=2), 1010.0)  # first back, its record's entry lacking
    assert not lineage.hello("k", 0, _ident("s0", world=2), 1010.2)  # the run went on
    assert lineage.hello("k", 0, _ident("u0", world=2), 1500.0)      # a restart, later
    lineage.tick(1501.0, _level({}))
    store.flush()
    old, new = RunStore(str(tmp_path / "b")).runs("k")
    assert sorted(old["ranks"]) == ["0", "1"] and sorted(new["ranks"]) == ["0"], (old["ranks"], new["ranks"])


def test_a_rank_that_joined_just_before_a_restart_resumes_the_run_not_a_new_one(tmp_path):
    """Ranks that join are written at the next tick: a collector killed in between restarts with
    a stored record that lacks them. The first to come back after the restart is still a rank of
    that run (its world size, no entry of its own): the run goes on with it, one run, every rank
    in its record at the next tick. A rank held under another session, or another world size,
    still begins a new run."""
    store = RunStore(str(tmp_path))
    lineage = Lineage(store)
    assert lineage.hello("late", 0, _ident("s0", world=2), 1000.0)  # the run's start: written at once
    assert not lineage.hello("late", 1, _ident("s1", world=2), 1000.5)  # written at the next tick...
    store.flush()  # ...which never came (SIGKILL)
    (rec,) = RunStore(str(tmp_path)).runs("late")
    assert sorted(rec["ranks"]) == ["0"], rec["ranks"]

    store = RunStore(str(tmp_path))
    lineage = Lineage(store)
    assert not lineage.hello("late", 1, _ident("s1", world=2), 1010.0)  # first back: not a new run
    assert not lineage.hello("late", 0, _ident("s0", world=2), 1010.2)
    lineage.tick(1011.0, _level({}))
    store.flush()
    (rec,) = RunStore(str(tmp_path)).runs("late")
    assert sorted(rec["ranks"]) == ["0", "1"] and rec["ended_at"] is None, rec

    store = RunStore(str(tmp_path))  # another restart; the job itself restarted, sessions anew
    lineage = Lineage(store)
    assert lineage.hello("late", 1, _ident("t1", world=2), 1100.0)
    store.flush()
    old, new = RunStore(str(tmp_path)).runs("late")
    assert (old["run"], new["run"]) == ("s0", "t1"), (old, new)
    assert old["ended_at"] is not None and new["ended_at"] is None, (old, new)
    lineage = Lineage(RunStore(str(tmp_path)))
    assert lineage.hello("late", 3, _ident("u3", world=4), 1200.0)  # another world size: a new run
