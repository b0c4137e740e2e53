"""Who may call ControlService (Capture makes every rank profile; DownloadTrace hands out
traces): with control_token, whoever sends it; without, only callers on the collector's own
host. Captures are rate-limited per job. The non-loopback peer is real: a network namespace
joined to this one by a veth pair, made by the test (root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import grpc
import pytest

from test_capture import agents, capture  # noqa: F401 - the fake agents of the capture tests


def test_control_token_is_required_when_set(start_collector, agents):  # noqa: F811
    running = start_collector(control_token="ctl")
    agents(running, 0)
    for metadata in (None, (("authorization", "Bearer wrong"),)):
        with pytest.raises(grpc.RpcError) as err:
            capture(running, metadata=metadata, job="j", steps=2)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "control_token" in err.value.details()
    reply = capture(running, metadata=(("authorization", "Bearer ctl"),), job="j", steps=2, timeout_s=10)
    assert reply.traces[0].trace.path == "/traces/rank0.json.gz"


def test_one_capture_per_job_per_capture_every_s(start_collector, agents):  # noqa: F811
    running = start_collector(capture_every_s=60)
    agents(running, 0)
    capture(running, job="j", steps=2, timeout_s=10)
    with pytest.raises(grpc.RpcError) as err:
        capture(running, job="j", steps=2, timeout_s=10)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most one capture per job every 60 s" in err.value.details()


def test_captures_of_bogus_jobs_do_not_empty_the_limiter(start_collector, agents):  # noqa: F811
    """10,000 captures of jobs with no connected rank are refused before the limiter sees
    them: the real job captured a moment ago is still limited."""
    running = start_collector(capture_every_s=60)
    agents(running, 0)
    capture(running, job="j", steps=2, timeout_s=10)
    for i in range(10_000):
        with pytest.raises(grpc.RpcError) as err:
            capture(running, job=f"bogus-{i}", steps=2, timeout_s=1)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        capture(running, job="j", steps=2, timeout_s=10)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()


CLIENT = """
import sys, grpc
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc
md = [("authorization", "Bearer " + sys.argv[2])] if sys.argv[2] else None
with grpc.insecure_channel(sys.argv[1]) as ch:
    try:
        agent_pb2_grpc.ControlServiceStub(ch).Capture(agent_pb2.CaptureRequest(job="nojob", steps=2), timeout=10,
                                                      metadata=md)
    except grpc.RpcError as e:
        print(e.code().name)
"""


@pytest.fixture
def netns():
    """A namespace with 10.233.7.2, joined by a veth pair to 10.233.7.1 here; removed after."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace")
    name, host_if = f"sw{uuid.uuid4().hex[:8]}", f"sw{uuid.uuid4().hex[:6]}"
    cmds = [["ip", "netns", "add", name],
            ["ip", "link", "add", host_if, "type", "veth", "peer", "name", "swpeer", "netns", name],
            ["ip", "addr", "add", "10.233.7.1/24", "dev", host_if], ["ip", "link", "set", host_if, "up"],
            ["ip", "-n", name, "addr", "add", "10.233.7.2/24", "dev", "swpeer"],
            ["ip", "-n", name, "link", "set", "swpeer", "up"], ["ip", "-n", name, "link", "set", "lo", "up"]]
    try:
        for cmd in cmds:
            subprocess.run(cmd, check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _call_from(ns, address, token):
    run = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, address, token],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_without_control_token_only_loopback_may_capture(start_collector, netns):
    """The agents' token alone lets a caller on the host capture (NOT_FOUND: the job has no rank,
    so the call got through), but not one from another host; control_token lets it in."""
    open_ = start_collector(grpc_listen="10.233.7.1:0", auth_token="agents")
    port = open_.collector.grpc_address.rsplit(":", 1)[1]
    assert _call_from(netns, f"10.233.7.1:{port}", "agents") == "UNAUTHENTICATED"
    local = subprocess.run([sys.executable, "-c", CLIENT, f"10.233.7.1:{port}", "agents"],
                           capture_output=True, text=True, timeout=60)
    assert local.stdout.strip() == "UNAUTHENTICATED", "10.233.7.1 is this host but not loopback"
    with_ctl = start_collector(grpc_listen="10.233.7.1:0", auth_token="agents", control_token="ctl")
    port = with_ctl.collector.grpc_address.rsplit(":", 1)[1]
    assert _call_from(netns, f"10.233.7.1:{port}", "ctl") == "NOT_FOUND"
    loop = start_collector(auth_token="agents")  # on 127.0.0.1
    run = subprocess.run([sys.executable, "-c", CLIENT, loop.collector.grpc_address, "agents"],
                         capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "NOT_FOUND", run.stderr
