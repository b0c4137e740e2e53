"""The drift detectors' long-lived state on disk, so a collector that restarts (redeployed,
killed, a job moved to another replica that shares the directory) keeps each rank's settled
level, its measured noise and an open episode instead of warming up again: jobs run for weeks,
and a slow ramp must be judged against the level the job settled at, not the level it had
drifted to by the restart.

One SQLite file (the standard library's ``sqlite3``) in the collector's ``state_dir``. The
caller is the engine, on the collector's event loop thread: a save is one small row per armed
rank at most once a minute (``REPLACE``), a load one indexed read when a rank is first seen.
A store that fails (disk full, read-only, damaged file) logs once and answers "nothing saved":
detection goes on without it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from typing import Optional

__all__ = ["DriftStore", "open_db", "close_db"]

log = logging.getLogger("stepwatch.collector")

_SCHEMA = """CREATE TABLE IF NOT EXISTS drift (
    job TEXT NOT NULL, rank INTEGER NOT NULL, state TEXT NOT NULL, saved_at REAL NOT NULL,
    PRIMARY KEY (job, rank))"""


def open_db(directory: Optional[str], schema: str, timeout: float = 5.0) -> sqlite3.Connection:
    """The collector's ``detection.sqlite`` in ``directory`` (made 0700; None: in memory), in
    autocommit mode, any thread, with ``schema`` applied; raises OSError or sqlite3.Error."""
    path = ":memory:"
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, "detection.sqlite")
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=timeout)
    db.execute(schema)
    return db


def close_db(db: Optional[sqlite3.Connection]) -> None:
    """Close a connection of :func:`open_db`, if any; a close that fails is nothing to report."""
    if db is not None:
        try:
            db.close()
        except sqlite3.Error:
            pass


class DriftStore:
    """``load(job, rank)`` -> the state saved for that rank, or None; ``save(job, rank,
    state)``. Rows carry the wall clock of their save; ``max_age_s``: older rows are not
    restored (that job is gone). ``clock`` is injectable."""

    def __init__(self, directory: str, max_age_s: float = 7 * 86400.0, clock=time.time):
        self.path = os.path.join(directory, "detection.sqlite")
        self.max_age_s, self._clock = max_age_s, clock
        self._db: Optional[sqlite3.Connection] = None
        self._failed = False
        try:
            self._db = open_db(directory, _SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            self._fail("open", exc)

    def _fail(self, what: str, exc: Exception) -> None:
        if not self._failed:
            log.error("stepwatch collector: detection state %s %s failed (%s); detection goes on "
                      "without it", self.path, what, exc)
        self._failed = True

    def load(self, job: str, rank: int) -> Optional[dict]:
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT state, saved_at FROM drift WHERE job = ? AND rank = ?",
                                   (job, rank)).fetchone()
        except sqlite3.Error as exc:
            self._fail("read", exc)
            return None
        if row is None or self._clock() - row[1] > self.max_age_s:
            return None
        try:
            state = json.loads(row[0])
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def save(self, job: str, rank: int, state: dict) -> None:
        if self._db is None:
            return
        try:
            self._db.execute("REPLACE INTO drift (job, rank, state, saved_at) VALUES (?, ?, ?, ?)",
                             (job, rank, json.dumps(state), self._clock()))
        except (sqlite3.Error, ValueError) as exc:
            self._fail("write", exc)

    def close(self) -> None:
        close_db(self._db)
        self._db = None
