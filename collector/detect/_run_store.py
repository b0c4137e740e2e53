"""The runs' records on disk: one SQLite table (``runs``) in the collector's ``state_dir``, next
to the drift state, the newest ``keep`` runs per job; in memory without a directory.

Never written on the collector's event loop: a save is a dict entry the store's own thread
writes every ``flush_s`` in one transaction (waiting at most ``lock_wait_s`` for another
process's lock); a read waits at most ``read_wait_s`` (then it answers from what this
collector holds). A failure (damaged, read-only, full, a lock held) is counted (``failures``),
logged once per run of failures, and the rows wait for the next flush: a store that could not
open tries again every 30 s. Until written, records are answered from memory (at most ``keep``
per job). Two collector replicas that share the directory each write whole rows (one statement
each) and never a torn one.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from typing import Optional

from ._persist import close_db, open_db

__all__ = ["RunStore"]

log = logging.getLogger("stepwatch.collector")

_SCHEMA = ("CREATE TABLE IF NOT EXISTS runs (job TEXT NOT NULL, run TEXT NOT NULL, started_at REAL NOT NULL, "
           "record TEXT NOT NULL, PRIMARY KEY (job, run))")
_REOPEN_S = 30.0


class RunStore:
    """The runs' records: ``runs(job)`` oldest first, ``save(record)``. ``directory`` None: in
    memory only. ``thread=False``: no writer thread (``flush()`` by hand)."""

    def __init__(self, directory: Optional[str], keep: int = 50, flush_s: float = 1.0, lock_wait_s: float = 1.0,
                 read_wait_s: float = 0.05, thread: bool = True):
        self.keep, self.directory = keep, directory
        self.path = os.path.join(directory, "detection.sqlite") if directory else ":memory:"
        self.flush_s, self.lock_wait_s, self.read_wait_s = flush_s, lock_wait_s, read_wait_s
        self.failures = 0
        self._logged = False
        self._db: Optional[sqlite3.Connection] = None  # the writer's
        self._reader: Optional[sqlite3.Connection] = None
        self._opened_at = -_REOPEN_S
        self._lock = threading.Lock()
        self._memory: dict[str, dict[str, dict]] = {}  # job -> run -> record not written (yet)
        self._dirty: set = set()  # (job, run) to write
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if directory:
            self._open()
            if thread:
                self._thread = threading.Thread(target=self._run, name="stepwatch-run-store", daemon=True)
                self._thread.start()

    def _open(self) -> None:
        self._opened_at = time.monotonic()
        try:
            self._db = open_db(self.directory, _SCHEMA, timeout=self.lock_wait_s)
            self._reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                           timeout=self.read_wait_s)
        except (OSError, sqlite3.Error) as exc:
            close_db(self._db)
            self._db = self._reader = None
            self._fail("open", exc)

    def _fail(self, what: str, exc: Exception) -> None:
        self.failures += 1
        if not self._logged:
            log.error("stepwatch collector: run records %s %s failed (%s); runs are kept in memory and written "
                      "when it can", self.path, what, exc)
        self._logged = True

    def runs(self, job: str) -> list[dict]:
        """The job's runs, oldest first (at most ``keep``): those written, and those held."""
        with self._lock:
            out = dict(self._memory.get(job, {}))
        if self._reader is not None:
            try:
                rows = self._reader.execute("SELECT run, record FROM runs WHERE job = ?", (job,)).fetchall()
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
        """Hold ``record`` and write it at the next flush (no I/O here)."""
        job, run = record["job"], record["run"]
        with self._lock:
            held = self._memory.setdefault(job, {})
            held[run] = record
            for old in sorted(held, key=lambda k: float(held[k]["started_at"]))[:-self.keep]:
                del held[old]
                self._dirty.discard((job, old))
            if self.directory:
                self._dirty.add((job, run))

    def flush(self) -> bool:
        """Write the records saved since the last flush; True when none is left to write."""
        with self._lock:
            todo = [(job, run, dict(self._memory[job][run])) for job, run in self._dirty
                    if run in self._memory.get(job, {})]
            self._dirty = set()
        if not todo:
            return True
        if self._db is None and time.monotonic() - self._opened_at >= _REOPEN_S:
            self._open()
        try:
            if self._db is None:
                raise sqlite3.OperationalError("not open")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for job, run, rec in todo:
                    self._db.execute("REPLACE INTO runs (job, run, started_at, record) VALUES (?, ?, ?, ?)",
                                     (job, run, float(rec["started_at"]), json.dumps(rec)))
                for job in {job for job, _, _ in todo}:
                    self._db.execute("DELETE FROM runs WHERE job = ? AND run NOT IN (SELECT run FROM runs WHERE "
                                     "job = ? ORDER BY started_at DESC LIMIT ?)", (job, job, self.keep))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, ValueError) as exc:
            if self._db is not None:
                self._fail("write", exc)
            with self._lock:
                self._dirty.update((job, run) for job, run, _ in todo)
            return False
        self._logged = False
        with self._lock:  # written: dropped from memory unless saved again meanwhile
            for job, run, rec in todo:
                held = self._memory.get(job, {})
                if (job, run) not in self._dirty and held.get(run) == rec:
                    del held[run]
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the writer outlives one bad flush
                log.exception("stepwatch collector: run records flush failed")

    def close(self) -> None:
        """Stop the writer, write what is held, close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lock_wait_s + self.flush_s + 1.0)
        if self.directory:
            self.flush()
        close_db(self._db)
        close_db(self._reader)
        self._db = self._reader = None
