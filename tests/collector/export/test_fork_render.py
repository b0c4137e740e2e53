"""/metrics rendered by a forked child process (collector/export/_fork_render.py): the same body as the
thread renders, over real gRPC and HTTP; a child that fails, dies or hangs is reaped and the
scrape still returns everything, rendered on the thread."""

from __future__ import annotations

import gzip
import os
import time

import pytest

from test_metrics_modes import _rank_batch

from collector_testlib import hello
from stepwatch.collector.export import _fork_render
from stepwatch.collector.export._exposition import render
from stepwatch.collector.state._yield import no_pause
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


def _feed(collector, ranks=3):
    with collector.channel() as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        for rank in range(ranks):
            acks = list(stub.Connect(iter([hello(rank=rank, world_size=ranks, session=f"s{rank}"), _rank_batch(rank)]),
                                     timeout=10))
            assert [a.ack.seq for a in acks] == [1]


def _rank_lines(body: bytes) -> list:
    """Every series but the collector's own (those move between two renders) and the alert
    registry's (rendered beside the state's, not by it)."""
    return [line for line in body.decode().splitlines()
            if not line.startswith(("stepwatch_collector_", "stepwatch_drift_armed_ranks",
                                    "stepwatch_drift_reach_ratio", "#"))]


def _children() -> set:
    me = str(os.getpid())
    out = set()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if pid.isdigit() and f.read().rsplit(")", 1)[1].split()[1] == me:
                    out.add(pid)
        except OSError:
            continue
    return out


def test_a_forked_render_returns_what_the_thread_renders(start_collector):
    running = start_collector(metrics_per_rank="full", metrics_render="process")
    _feed(running)
    c = running.collector
    assert c.settings.metrics_render == "process" and c._fork is not None
    before = _children()
    body = running.get("/metrics")[2]
    zipped = gzip.decompress(running.get("/metrics", headers={"Accept-Encoding": "gzip"})[2])
    thread = render(c.rank_metrics.families(no_pause)).encode()
    lines = _rank_lines(body)
    assert lines == _rank_lines(thread) and len(lines) > 300
    assert 'stepwatch_gpu_utilization_ratio{training_job="j",rank="2"' in body.decode()
    assert _rank_lines(zipped) == lines
    assert c._fork.private_bytes > 0 and not c._fork.failures
    assert b'stepwatch_collector_scrape_child_failures_total{reason="exit"} 0.0\n' in body
    # each fork timed; a body shows the forks before its own
    assert b"stepwatch_collector_scrape_fork_seconds_count 0.0\n" in body and c._fork.fork_seconds.count == 2
    assert _children() == before  # every child reaped


def test_a_failing_child_falls_back_to_the_thread_and_is_counted(start_collector, monkeypatch, caplog):
    running = start_collector(metrics_per_rank="full", metrics_render="process")
    _feed(running)
    c = running.collector
    parent = os.getpid()
    real = c.rank_metrics.families

    def families(pause=no_pause, frozen=False):
        if os.getpid() != parent:
            raise RuntimeError("render failed in the child")
        return real(pause, frozen)

    monkeypatch.setattr(c.rank_metrics, "families", families)
    before = _children()
    body = running.get("/metrics")[2]
    assert _rank_lines(body) == _rank_lines(render(real(no_pause)).encode())
    assert c._fork.failures == {"exit": 1}
    assert "child exited with status 1" in caplog.text
    # (the next scrape's child fails too; logged once a minute. The registry's families are
    # rendered before a scrape's child runs: a body counts the failures of the scrapes before it)
    assert b'stepwatch_collector_scrape_child_failures_total{reason="exit"} 1.0\n' in running.get("/metrics")[2]
    assert b'stepwatch_collector_scrape_child_failures_total{reason="exit"} 2.0\n' in running.get("/metrics")[2]
    assert caplog.text.count("child exited with status 1") == 1
    assert _children() == before


def test_a_hung_child_is_killed_at_the_deadline(start_collector, monkeypatch):
    running = start_collector(metrics_render="process")
    _feed(running, ranks=1)
    c = running.collector
    c._fork.timeout_s = 1.0
    parent = os.getpid()
    real = c.rank_metrics.families

    def families(pause=no_pause, frozen=False):
        if os.getpid() != parent:
            time.sleep(60)
        return real(pause, frozen)

    monkeypatch.setattr(c.rank_metrics, "families", families)
    before = _children()
    started = time.monotonic()
    body = running.get("/metrics")[2]
    assert time.monotonic() - started < 10
    assert b"stepwatch_steps_total" in body and c._fork.failures == {"timeout": 1}
    assert _children() == before


def test_the_child_sees_no_half_done_update():
    """fork() happens with the lock held, so the child never sees an update half done (here,
    without it, about half the children would: the writer sleeps between its two fields)."""
    import threading

    lock, shared, stop = threading.Lock(), {"a": 0, "b": 0}, threading.Event()

    def writer():
        while not stop.is_set():
            with lock:
                shared["a"] += 1
                time.sleep(0.002)
                shared["b"] += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    fork = _fork_render.ForkRender(timeout_s=10)
    try:
        seen = [fork.run(lock, lambda: b"%d %d" % (shared["a"], shared["b"])) for _ in range(20)]
    finally:
        stop.set()
        thread.join(5)
    pairs = [tuple(map(int, s.split())) for s in seen]
    assert all(a == b for a, b in pairs) and pairs[-1][0] > 0 and not fork.failures


def test_auto_renders_in_a_process_only_with_two_cores(tmp_path, monkeypatch):
    """``auto``: the CPU affinity, capped by a cgroup quota (v2 and v1 files), decides."""
    from stepwatch.collector import _app

    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "cpu.max").write_text("150000 100000\n")
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("400000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    unlimited = tmp_path / "none"
    unlimited.mkdir()
    (unlimited / "cgroup.controllers").write_text("cpu memory\n")
    (unlimited / "cpu.max").write_text("max 100000\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    proc = str(tmp_path / "no-proc-file")  # no line: the mount's root is the process's cgroup
    assert _fork_render.cores(str(v2), proc) == 1.5
    assert _fork_render.cores(str(tmp_path / "v1"), proc) == 4.0
    assert _fork_render.cores(str(unlimited), proc) == 6.0
    assert _fork_render.cores(str(tmp_path / "missing"), proc) == 6.0
    monkeypatch.setattr(_app, "cores", lambda: 6.0)
    assert _app.resolve_render("auto", True) == "process" and _app.resolve_render("thread", True) == "thread"
    assert _app.resolve_render("auto", False) == "thread"  # gRPC loaded first with its fork handlers on
    monkeypatch.setattr(_app, "cores", lambda: 1.5)
    assert _app.resolve_render("auto", True) == "thread" and _app.resolve_render("process", True) == "process"


def test_the_command_line_turns_grpc_fork_handlers_off_and_the_library_does_not():
    """The `stepwatch` command line sets GRPC_ENABLE_FORK_SUPPORT=0 before any subcommand loads
    gRPC (so `stepwatch collector` may fork its render); importing stepwatch.collector alone
    leaves the environment as it was, and auto then keeps the thread."""
    import subprocess
    import sys

    code = ("import os; os.environ.pop('GRPC_ENABLE_FORK_SUPPORT', None); import {module} as m, grpc; "
            "import stepwatch.collector as c; "
            "print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT', '-'), c.grpc_fork_handlers_off())")
    for module, want in (("stepwatch.collector", "- False"), ("stepwatch.collector.tools", "0 True")):
        out = subprocess.run([sys.executable, "-c", code.format(module=module)], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and out.stdout.split() == want.split(), (module, out.stdout, out.stderr)


def test_limits_are_read_in_the_process_own_cgroup_and_its_parents(tmp_path, monkeypatch):
    """A collector in a nested cgroup (a systemd unit, a pod's container without a cgroup
    namespace) is bound by its own cgroup's limits and its parents': the tightest counts, a
    level without the files is passed over; a cgroup path missing under the mount (a container
    that sees its own cgroup as the mount's root) leaves the root."""
    v2 = tmp_path / "v2"
    unit = v2 / "system.slice" / "stepwatch.service"
    unit.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("9000000000\n")
    (v2 / "system.slice" / "memory.max").write_text(f"{8 << 30}\n")  # the slice: 8 GiB, 6 used
    (v2 / "system.slice" / "memory.current").write_text(f"{6 << 30}\n")
    (v2 / "system.slice" / "cpu.max").write_text("300000 100000\n")
    (unit / "memory.max").write_text(f"{4 << 30}\n")  # the unit: 4 GiB, 1 used
    (unit / "memory.current").write_text(f"{1 << 30}\n")
    (unit / "cpu.max").write_text("max 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/stepwatch.service\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert _fork_render.memory_room(str(v2), str(proc)) == 2 << 30  # the slice leaves less
    assert _fork_render.cores(str(v2), str(proc)) == 3.0
    v1 = tmp_path / "v1"
    (v1 / "memory" / "docker" / "abc").mkdir(parents=True)
    (v1 / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    (v1 / "memory" / "docker" / "abc" / "memory.usage_in_bytes").write_text(f"{256 << 20}\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory" / "memory.usage_in_bytes").write_text("1000\n")
    proc.write_text("5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    assert _fork_render.memory_room(str(v1), str(proc)) == 768 << 20
    proc.write_text("4:memory:/docker/other\n")  # not under this mount: only its root
    assert _fork_render.memory_room(str(v1), str(proc)) is None
    proc.write_text("4:memory:/../../docker/abc\n")  # outside the namespace's view: only the root
    assert _fork_render.memory_room(str(v1), str(proc)) is None


def test_memory_room_under_a_real_cgroup_limit():
    """A process moved into a new memory cgroup with a limit reads that limit. (The mount's
    root, which the collector read before, has no limit on this kind of machine.) Skipped
    where cgroups cannot be made."""
    import subprocess
    import sys

    root = "/sys/fs/cgroup"
    v2 = os.path.exists(os.path.join(root, "cgroup.controllers"))
    group = os.path.join(root if v2 else os.path.join(root, "memory"), f"stepwatch-test-{os.getpid()}")
    try:
        os.mkdir(group)
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup here: {exc}")
    limit = 512 << 20
    try:
        try:
            with open(os.path.join(group, "memory.max" if v2 else "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit))
        except OSError as exc:
            pytest.skip(f"cannot set a memory limit here: {exc}")
        code = ("import os, sys\n"
                "try:\n"
                "    with open(sys.argv[1], 'w') as f: f.write(str(os.getpid()))\n"
                "except OSError as exc: sys.exit(f'cannot join: {exc}')\n"
                "from stepwatch.collector.export._fork_render import memory_room; print(memory_room())")
        out = subprocess.run([sys.executable, "-c", code, os.path.join(group, "cgroup.procs")],
                             capture_output=True, text=True, timeout=60)
        if out.returncode and "cannot join" in out.stderr:
            pytest.skip(out.stderr.strip())
        assert out.returncode == 0, out.stderr
        room = int(out.stdout)  # "None" (no limit seen) fails here
        assert limit - (256 << 20) < room < limit, room  # the limit less what this small process uses
    finally:
        for _ in range(50):  # the child has exited; its cgroup empties a moment later
            try:
                os.rmdir(group)
                break
            except OSError:
                time.sleep(0.1)


def test_no_child_where_the_memory_limit_has_no_room(tmp_path, start_collector):
    """The cgroup memory files read (v2, v1, none); a collector whose limit would not hold a
    render process's copies renders on the thread and counts it."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "memory.max").write_text("2147483648\n")
    (v2 / "memory.current").write_text("1610612736\n")
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (v1 / "memory.usage_in_bytes").write_text("1000\n")
    none = tmp_path / "none"
    none.mkdir()
    (none / "cgroup.controllers").write_text("cpu memory\n")
    (none / "memory.max").write_text("max\n")
    (none / "memory.current").write_text("1000\n")
    proc = str(tmp_path / "no-proc-file")
    assert _fork_render.memory_room(str(v2), proc) == 512 << 20
    assert _fork_render.memory_room(str(tmp_path / "v1"), proc) is None
    assert _fork_render.memory_room(str(none), proc) is None
    assert _fork_render.memory_room(str(tmp_path / "missing"), proc) is None

    running = start_collector(metrics_render="process")
    _feed(running, ranks=1)
    c = running.collector
    c._fork._room = lambda: 1 << 20  # 1 MiB left
    before = _children()
    body = running.get("/metrics")[2]
    assert b"stepwatch_steps_total" in body and c._fork.failures == {"memory": 1}
    assert c._fork.fork_seconds.count == 0 and _children() == before  # no fork at all
    c._fork._room = lambda: None
    running.get("/metrics")
    assert c._fork.fork_seconds.count == 1 and c._fork.failures == {"memory": 1}
