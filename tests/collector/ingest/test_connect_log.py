"""Connect and disconnect lines are rate-limited with a count: a real collector process, 60
agent streams over real gRPC that connect and leave at once (a fleet reconnecting in a loop
wrote a line per stream: 269,200 lines in 5 minutes)."""

from __future__ import annotations

import logging
import signal
import time

import grpc

from _procs import Collector
from collector_testlib import hello
from stepwatch.collector.ingest._connect_log import ConnectLog
from stepwatch.proto.stepwatch.v1 import agent_pb2_grpc


def test_a_fleet_reconnecting_writes_twenty_lines_a_minute_and_a_count_of_the_rest(tmp_path):
    col = Collector(tmp_path).start()
    try:
        with grpc.insecure_channel(col.grpc) as chan:
            stub = agent_pb2_grpc.AgentServiceStub(chan)
            for rank in range(60):
                list(stub.Connect(iter([hello(job="churn", rank=rank, session=f"s{rank}")]), timeout=10))
        log = tmp_path / f"collector-{col.name}-1.log"
        deadline = time.monotonic() + 10
        while log.read_text().count("agent connected: job=churn") < 10:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        col.kill(signal.SIGTERM)  # the collector stops its server, which writes the count held back
    text = log.read_text()
    lines = [line for line in text.splitlines() if "job=churn" in line]
    assert len(lines) == 20, lines
    (count,) = [line for line in text.splitlines() if "were not logged one by one" in line]
    held = [int(w) for w in count.split("stepwatch collector: ")[-1].split()[:6] if w.isdigit()]
    connects = sum(1 for line in lines if "agent connected" in line)
    assert held == [60 - connects, 60 - (20 - connects)], (count, connects)


def test_the_window_starts_again_and_says_what_it_held(caplog):
    now = [0.0]
    log = logging.getLogger("test.connect_log")
    cl = ConnectLog(log, per_window=2, window_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="test.connect_log"):
        for rank in range(5):
            cl.connected("j", rank, "h", "s")
        cl.disconnected("j", 0)
        now[0] = 61.0
        cl.connected("j", 9, "h", "s")
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[0].endswith("job=j rank=0 host=h session=s") and msgs[1].endswith("job=j rank=1 host=h session=s")
    assert "3 more agent connects and 1 disconnects in the last 61 s" in msgs[2], msgs
    assert msgs[3].endswith("job=j rank=9 host=h session=s") and len(msgs) == 4, msgs
