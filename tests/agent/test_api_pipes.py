"""The agent owns its pipe fds: a late close of the Popen's file objects (what garbage
collection of a detached agent's Popen does) must not hit fds a later agent now uses."""

import os

from stepwatch import agent


def test_late_close_of_old_popen_streams_leaves_new_agent_intact(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPWATCH_COLLECTOR", "127.0.0.1:1")
    monkeypatch.setenv("STEPWATCH_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("STEPWATCH_SHUTDOWN_TIMEOUT_S", "0.2")
    first = agent.attach(job="pipes", windows=False)
    old_popen = first.sidecar
    agent.detach()
    second = agent.attach(job="pipes", windows=False)
    try:
        # The fd numbers the first agent released are typically reused by the second.
        old_popen.stdin.close()
        old_popen.stdout.close()
        for _ in range(50):
            agent.step()
        second._writer.flush()
        assert not second._writer.closed and second._writer.dropped == 0
        os.fstat(second._reply_fd)  # still open
    finally:
        agent.detach()
