"""Out of file descriptors: a real collector process with a descriptor limit of 256 (soft and
hard, so it cannot lift it) and 340 idle connections held against its gRPC and HTTP ports.
New connections are refused while none is left, counted, and logged in one line per minute
(not a traceback per failed accept: 50 MB of them in 20 s before); once the idle connections
are closed, the collector serves again."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request

from _procs import free_port


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_descriptor_exhaustion_refuses_counts_and_logs_once(tmp_path):
    grpc_port, http_port = free_port(), free_port()
    ready, log_path = tmp_path / "ready.json", tmp_path / "collector.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stepwatch.collector.tools", "collector", "--grpc-listen", f"127.0.0.1:{grpc_port}",
             "--http-listen", f"127.0.0.1:{http_port}", "--ready-file", str(ready)],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=_limit,
            env=dict(os.environ, STEPWATCH_TRACE_STORE_DIR=str(tmp_path / "traces")))
    socks = []
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        assert json.loads(ready.read_text())["http"]
        for port in (grpc_port, http_port):
            for _ in range(170):
                try:
                    socks.append(socket.create_connection(("127.0.0.1", port), timeout=1))
                except OSError:
                    break  # the listen backlog is full too
        assert len(socks) > 256, len(socks)
        time.sleep(3)  # accepts keep failing meanwhile
        assert proc.poll() is None
    finally:
        for s in socks:
            s.close()
    url = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + 60
    while True:  # the descriptors come back as the collector sees the closes
        try:
            metrics = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    failed = [line for line in metrics.splitlines()
              if line.startswith('stepwatch_collector_accepts_failed_total{reason="fd_exhausted"}')]
    assert failed and float(failed[0].split()[-1]) > 0, failed
    assert urllib.request.urlopen(f"{url}/healthz", timeout=5).status == 200
    proc.terminate()
    proc.wait(timeout=30)
    text = log_path.read_text()
    refused = [line for line in text.splitlines() if "new connections refused" in line]
    assert len(refused) == 1 and "file descriptor limit 256" in refused[0], refused
    assert "Traceback" not in text and len(text) < 5000, text[:3000]
