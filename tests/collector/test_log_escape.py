"""Strings an agent sends never forge or split collector log lines: a real collector process,
a Hello over real gRPC whose host and session id carry a newline and a terminal escape."""

from __future__ import annotations

import time

import grpc

from _procs import Collector
from collector_testlib import hello
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


def test_a_newline_in_a_peer_string_stays_inside_one_log_line(tmp_path):
    col = Collector(tmp_path).start()
    try:
        forged = "2026-11-26 00:00:00,000 WARNING stepwatch.collector: stepwatch alert firing critical"
        msg = hello(job="esc", host=f"node-a\n{forged}", session=f"s1\r\n\x1b[31mred")
        with grpc.insecure_channel(col.grpc) as chan:
            list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter([msg]), timeout=10))
        log = tmp_path / f"collector-{col.name}-1.log"
        deadline = time.monotonic() + 10
        while "agent disconnected: job=esc" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        col.kill()
    lines = log.read_text().splitlines()
    (connected,) = [line for line in lines if "agent connected: job=esc" in line]
    assert "host=node-a\\n2026-11-26 00:00:00,000 WARNING" in connected, connected
    assert "session=s1\\r\\n\\x1b[31mred" in connected, connected
    assert not any(line.startswith("2026-11-26 00:00:00,000") for line in lines), lines
    assert "\x1b" not in log.read_text()
