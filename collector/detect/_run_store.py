"""The runs' records on disk: one SQLite table (``runs``) in the collector's ``state_dir``, next
to the drift state, the newest ``keep`` runs per job; in memory without a directory, and from
the first failure on (damaged, read-only, full: logged once)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from typing import Optional

from ._persist import close_db, open_db

__all__ = ["RunStore"]

log = logging.getLogger("stepwatch.collector")


class RunStore:
    """The runs' records: ``runs(job)`` oldest first, ``save(record)``. ``directory`` None: in
    memory. SQLite in autocommit mode with a short busy timeout, so two collector replicas that
    share the directory each write whole rows (one statement each) and never a torn one."""

    def __init__(self, directory: Optional[str], keep: int = 50):
        self.keep = keep
        self.path = os.path.join(directory, "detection.sqlite") if directory else ":memory:"
        self._failed = False
        self._db: Optional[sqlite3.Connection] = None
        try:
            self._db = open_db(directory, "CREATE TABLE IF NOT EXISTS runs (job TEXT NOT NULL, run TEXT NOT NULL, "
                               "started_at REAL NOT NULL, record TEXT NOT NULL, PRIMARY KEY (job, run))", timeout=1.0)
        except (OSError, sqlite3.Error) as exc:
            self._fail("open", exc)
            self._db = None
        self._memory: dict[str, dict[str, dict]] = {}  # job -> run -> record, when the file fails

    def _fail(self, what: str, exc: Exception) -> None:
        if not self._failed:
            log.error("stepwatch collector: run records %s %s failed (%s); runs are kept in memory from now on",
                      self.path, what, exc)
        self._failed = True

    def runs(self, job: str) -> list[dict]:
        """The job's stored runs, oldest first (at most ``keep``)."""
        out = dict(self._memory.get(job, {}))
        if self._db is not None and not self._failed:
            try:
                rows = self._db.execute("SELECT run, record FROM runs WHERE job = ?", (job,)).fetchall()
            except sqlite3.Error as exc:
                self._fail("read", exc)
                rows = []
            for run, text in rows:
                try:
                    rec = json.loads(text)
                except ValueError:
                    continue
                if isinstance(rec, dict) and run not in out:
                    out[run] = rec
        return sorted(out.values(), key=lambda r: float(r.get("started_at", 0)))[-self.keep:]

    def save(self, record: dict) -> None:
        job, run = record["job"], record["run"]
        if self._db is not None and not self._failed:
            try:
                self._db.execute("REPLACE INTO runs (job, run, started_at, record) VALUES (?, ?, ?, ?)",
                                 (job, run, float(record["started_at"]), json.dumps(record)))
                self._db.execute("DELETE FROM runs WHERE job = ? AND run NOT IN (SELECT run FROM runs WHERE job = ? "
                                 "ORDER BY started_at DESC LIMIT ?)", (job, job, self.keep))
                return
            except (sqlite3.Error, ValueError) as exc:
                self._fail("write", exc)
        held = self._memory.setdefault(job, {})
        held[run] = record
        for old in sorted(held, key=lambda k: float(held[k]["started_at"]))[:-self.keep]:
            del held[old]

    def close(self) -> None:
        close_db(self._db)
        self._db = None
