"""Strings an agent sends never forge or split collector log lines: a real collector process,
a Hello over real gRPC whose host and session id carry a newline, a terminal escape, Unicode
line breaks and bidi overrides."""

from __future__ import annotations

import time

import grpc

from _procs import Collector
from collector_testlib import hello
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


def _connect(tmp_path, msg, refused_job: str = "") -> tuple[str, str]:
    """A real collector's log text once ``msg``'s stream has come and gone, and (with
    ``refused_job``) what a Hello of that job name got back."""
    col = Collector(tmp_path).start()
    refused = ""
    try:
        with grpc.insecure_channel(col.grpc) as chan:
            list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter([msg]), timeout=10))
            if refused_job:
                try:
                    refused = str(list(agent_pb2_grpc.AgentServiceStub(chan).Connect(
                        iter([hello(job=refused_job)]), timeout=10)))
                except grpc.RpcError as exc:
                    refused = exc.details() or ""
        log = tmp_path / f"collector-{col.name}-1.log"
        deadline = time.monotonic() + 10
        while f"agent disconnected: job={msg.hello.job}" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        col.kill()
    return log.read_text(), refused


def test_a_newline_in_a_peer_string_stays_inside_one_log_line(tmp_path):
    forged = "2026-11-26 00:00:00,000 WARNING stepwatch.collector: stepwatch alert firing critical"
    text, _ = _connect(tmp_path, hello(job="esc", host=f"node-a\n{forged}", session="s1\r\n\x1b[31mred"))
    lines = text.splitlines()
    (connected,) = [line for line in lines if "agent connected: job=esc" in line]
    assert "host=node-a\\n2026-11-26 00:00:00,000 WARNING" in connected, connected
    assert "session=s1\\r\\n\\x1b[31mred" in connected, connected
    assert not any(line.startswith("2026-11-26 00:00:00,000") for line in lines), lines
    assert "\x1b" not in text


def test_unicode_line_breaks_and_bidi_overrides_stay_escaped_inside_one_line(tmp_path):
    """U+0085, U+2028, U+2029 (lines to a viewer that splits on Unicode line breaks), a C1
    control (U+009B, a terminal's CSI) and a bidi override in a Hello's host: written escaped,
    one line, nothing forged; a job name holding them is refused with the character named."""
    forged = "2026-11-26 00:00:00,000 WARNING stepwatch.collector: FORGED-IN-HOST"
    msg = hello(job="uesc", host=f"node-a\u2028{forged}\u0085x\u2029y\u009b31m\u202egnp", session="s1")
    text, refused = _connect(tmp_path, msg, refused_job="FORGED\u2028job")
    assert not any(c in text for c in "\u2028\u2029\u0085\u009b\u202e"), repr(text[-600:])
    (connected,) = [line for line in text.splitlines() if "agent connected: job=uesc" in line]
    assert "host=node-a\\u2028" + forged + "\\x85x\\u2029y\\x9b31m\\u202egnp" in connected, connected
    assert "U+2028" in refused, refused
