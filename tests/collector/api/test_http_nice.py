"""The collector's HTTP worker thread (/metrics, /api/jobs) runs at a lower priority than the
event loop (``http_nice``, default 10; Linux): read from /proc for a real collector process,
after real requests made the worker thread exist. With ``http_nice`` 0 no thread is lowered."""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread niceness is Linux's")


def _nices(pid: int) -> dict:
    """Each thread's niceness, by thread id (field 19 of /proc/PID/task/TID/stat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except FileNotFoundError:
            continue
        out[int(tid)] = int(stat.rsplit(")", 1)[1].split()[16])
    return out


@pytest.mark.parametrize("nice, expected", [(None, 10), ("0", 0), ("25", None)])
def test_the_http_worker_thread_is_lowered_and_the_others_are_not(collector_factory, monkeypatch, nice, expected):
    if nice is not None:
        monkeypatch.setenv("STEPWATCH_HTTP_NICE", nice)
    if expected is None:  # out of range: refused at start with the option's name
        with pytest.raises(AssertionError) as exc:
            collector_factory()
        assert "http_nice" in str(exc.value) or "STEPWATCH_HTTP_NICE" in str(exc.value)
        return
    col = collector_factory()
    base = _nices(col.proc.pid)[col.proc.pid]
    col.scrape_text()  # the worker thread starts with its first job
    col.api("/api/jobs")
    lowered = {tid: n - base for tid, n in _nices(col.proc.pid).items() if n != base}
    assert list(lowered.values()) == ([min(expected, 19 - base)] if expected else []), lowered
    assert _nices(col.proc.pid)[col.proc.pid] == base  # the main (event loop) thread as it was
