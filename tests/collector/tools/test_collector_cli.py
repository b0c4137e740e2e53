"""The CLI as a real subprocess: bad values exit 2; the collector starts, serves, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest

from collector_testlib import batch, hello
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc

from stepwatch.collector.tools import main

ENV = {k: v for k, v in os.environ.items() if not k.startswith("STEPWATCH_")}


def test_bad_value_exits_2_with_one_line(capsys):
    assert main(["collector", "--grpc-listen", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepwatch collector: error: option 'grpc_listen' from argument: invalid value 'nope'")
    assert err.count("\n") == 1


def test_bad_config_file_exits_2(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("- not a mapping\n")
    assert main(["collector", "--config", str(cfg)]) == 2
    assert "c.yaml: expected a mapping" in capsys.readouterr().err


def test_help_names_env_and_default(capsys):
    with pytest.raises(SystemExit):
        main(["collector", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "env STEPWATCH_GRPC_LISTEN, default '127.0.0.1:7470'" in out and "STEPWATCH_AGENT_GRACE_S" in out


def wait_for(path, proc, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "collector did not become ready"
        time.sleep(0.05)  # polling a subprocess, not timer logic
    return json.loads(path.read_text())


def test_collector_subprocess_ready_healthz_sigterm(tmp_path):
    ready = tmp_path / "ready.json"
    cmd = [sys.executable, "-m", "stepwatch.collector.tools", "collector", "--grpc-listen", "127.0.0.1:0",
           "--http-listen", "127.0.0.1:0", "--ready-file", str(ready), "--record", str(tmp_path / "r.jsonl")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        info = wait_for(ready, proc)
        assert info["pid"] == proc.pid and info["grpc"].startswith("127.0.0.1:")
        with urllib.request.urlopen(f"http://{info['http']}/healthz", timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b"ok\n"
        outgoing: "queue.Queue" = queue.Queue()
        for msg in (hello(), batch(1)):
            outgoing.put(msg)
        with grpc.insecure_channel(info["grpc"]) as chan:  # a live agent stream must not hold up shutdown
            replies = agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(outgoing.get, None), timeout=30)
            assert next(replies).ack.seq == 1
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=15)
            with pytest.raises(grpc.RpcError):
                list(replies)
        assert proc.returncode == 0, err
        assert time.monotonic() - start < 5
        assert (f"stepwatch collector: gRPC on {info['grpc']}; the page http://{info['http']}/, "
            f"metrics http://{info['http']}/metrics") in err.decode()
        assert not list(tmp_path.glob("ready.json.tmp*"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_in_use_exits_1(tmp_path):
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "collector", "--grpc-listen",
                               "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}"],
                              capture_output=True, timeout=30, env=ENV)
    assert proc.returncode == 1 and b"cannot bind HTTP address" in proc.stderr


def test_a_grpc_port_in_use_is_said_once_without_grpcs_own_log_line():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "collector", "--grpc-listen",
                               f"127.0.0.1:{port}", "--http-listen", "127.0.0.1:0"],
                              capture_output=True, timeout=30, env=ENV)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and f"cannot bind gRPC address 127.0.0.1:{port}: the port is in use" in err, err
    assert "add_port" not in err and "chttp2" not in err, err
