"""`stepwatch stack` wires the collector to its Alertmanager: a collector alert (an OOM sent by
an agent over real gRPC) arrives in the stack's real Alertmanager with its summary, and the
banner names the live page. Needs the Debian prometheus and prometheus-alertmanager binaries."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import time
import urllib.request

import grpc
import pytest

from stepwatch.collector.tools.stack import LocalStack, binaries
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

pytestmark = pytest.mark.skipif(binaries() is None, reason="needs prometheus and prometheus-alertmanager")


def _batch(seq: int, now: float, ooms: int) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(batch=agent_pb2.Batch(
        seq=seq, steps=[agent_pb2.StepRecord(step=seq, end_time_s=now, duration_s=0.05)],
        allocator=[agent_pb2.AllocatorSample(time_s=now, device=0, allocated_bytes=1 << 30, reserved_bytes=2 << 30,
                                             device_total_bytes=80 << 30, ooms=ooms)]))


def test_a_collector_alert_reaches_the_stacks_alertmanager(tmp_path):
    stack = LocalStack(str(tmp_path / "stack"), scrape_interval="1s").start()
    try:
        assert f"live page     http://{stack.collector_http}/" in stack.describe()
        now = time.time()
        messages = [agent_pb2.AgentMessage(hello=agent_pb2.Hello(job="oom-job", rank=0, world_size=1, host="node-a",
                                                                 pid=4242, session_id="s1")),
                    _batch(1, now, 0), _batch(2, now + 1, 1)]
        with grpc.insecure_channel(stack.collector_grpc) as chan:
            list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(messages), timeout=10))
        deadline, found = time.monotonic() + 60, []
        while time.monotonic() < deadline and not found:
            with urllib.request.urlopen(stack.alertmanager_url + "/api/v2/alerts", timeout=5) as resp:
                alerts = json.loads(resp.read())
            found = [a for a in alerts if a["labels"].get("alertname") == "StepwatchOOM"
                     and a["labels"].get("training_job") == "oom-job"]
            time.sleep(0.5)
        assert found, "the collector's StepwatchOOM alert never reached the stack's Alertmanager"
        assert found[0]["labels"]["source"] == "collector" and found[0]["annotations"]["summary"]
        # the hint printed for the Alertmanager is one a person can follow: Debian's has no web
        # application (its page says to use amtool), and the amtool command given lists the alert
        if not stack.alertmanager_ui:
            hint = stack.alertmanager_hint
            assert f"Alertmanager  {hint}" in stack.describe() and hint.startswith("amtool alert query"), hint
            if shutil.which("amtool"):
                out = subprocess.run(hint.split("  (")[0].split(), capture_output=True, text=True, timeout=30)
                assert out.returncode == 0 and "StepwatchOOM" in out.stdout, (out.stdout, out.stderr)
    finally:
        stack.stop()


def test_the_demos_slowdown_alert_reaches_its_alertmanager(tmp_path):
    """`stepwatch demo` with the binaries present runs the stack: its job's drift alert, with
    the why, arrives in the demo's Alertmanager while the demo stays up; and all that the demo
    without a terminal must do (tests/e2e/test_demo_e2e.py's check, on this one run)."""
    import re
    import sys

    from _procs import start_demo, stop_demo

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "e2e"))
    from test_demo_e2e import check_demo

    proc, out = start_demo(tmp_path, "--steps", "240", timeout_s=240)
    try:
        # a web page's address, or (Debian's Alertmanager has none) the amtool command naming it
        am = re.search(r"Alertmanager\s+(?:amtool alert query --alertmanager\.url=)?(http://\S+)", out).group(1)
        deadline, found = time.monotonic() + 60, []
        while time.monotonic() < deadline and not found:
            with urllib.request.urlopen(am + "/api/v2/alerts", timeout=5) as resp:
                found = [a for a in json.loads(resp.read()) if a["labels"].get("alertname") == "StepwatchThroughputDrift"
                         and a["labels"].get("training_job") == "stepwatch-demo"]
            time.sleep(0.5)
        assert found, out[-3000:]
        assert found[0]["labels"]["source"] == "collector" and "since step" in found[0]["annotations"]["summary"]
        assert found[0]["annotations"].get("diagnosis"), found[0]["annotations"]
        check_demo(proc, out)  # (the demo printed its alerts before "keeps running")
    finally:
        stop_demo(proc)
