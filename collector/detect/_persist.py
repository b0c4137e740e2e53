"""The drift detectors' long-lived state on disk, so a collector that restarts (redeployed,
killed, a job moved to another replica that shares the directory) keeps each rank's settled
level, its measured noise and an open episode instead of warming up again: jobs run for weeks,
and a slow ramp must be judged against the level the job settled at, not the level it had
drifted to by the restart.

One SQLite file (the standard library's ``sqlite3``) in the collector's ``state_dir``, never
written on the collector's event loop: a save (one small row per armed rank, at most about once
a minute) is a dict entry the store's own thread writes every ``flush_s`` in one transaction,
waiting at most ``lock_wait_s`` for another process's lock; a load (once, when a rank is first
seen) is one indexed read that waits at most ``read_wait_s`` (then the rank learns afresh; for
the next ``_READ_BACKOFF_S`` no read waits, so a fleet that connects while another process holds
the file's lock does not add a wait per rank). A
failure (disk full, read-only, a lock held, a damaged file) is counted (``failures``:
stepwatch_collector_state_store_failures_total), logged once per run of failures, and the
writes wait for the next flush: saving resumes when the disk has room again (a store that
could not open at start tries again every ``_REOPEN_S``). A kill loses at most the last
``flush_s`` of saves; ``close`` writes what is pending.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from typing import Optional

__all__ = ["DriftStore", "StoreFile", "open_db", "close_db"]

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


_REOPEN_S = 30.0  # a store that could not open tries again this often
_READ_BACKOFF_S = 5.0  # after a read that failed, reads answer "nothing" without trying this long


class StoreFile:
    """``detection.sqlite`` as a store uses it off the event loop: a writer connection
    (``db``, the flushing thread's; waits ``lock_wait_s`` for another process's lock) and a
    reader (waits ``read_wait_s``; after a read that failed, the reads of the next
    ``read_backoff_s`` answer None at once, counted in ``skipped``); ``failures`` counts reads
    and writes that failed, logged once per run of failures as "``label`` PATH WHAT failed
    (ERROR); ``after``"; a file that
    could not open is opened again at a write ``_REOPEN_S`` later. With ``thread``, a daemon
    thread calls ``flush()`` every ``flush_s`` until :meth:`close`."""

    def __init__(self, directory: str, schema: str, label: str, after: str, flush, flush_s: float = 1.0,
                 lock_wait_s: float = 1.0, read_wait_s: float = 0.05, thread: bool = True):
        self.directory, self._schema, self._label, self._after = directory, schema, label, after
        self.path = os.path.join(directory, "detection.sqlite")
        self.flush_s, self.lock_wait_s, self.read_wait_s = flush_s, lock_wait_s, read_wait_s
        self.failures = 0
        self.skipped = 0  # reads not tried: within read_backoff_s of one that failed
        self.read_backoff_s = _READ_BACKOFF_S
        self._read_again_at = -_READ_BACKOFF_S
        self._logged = False  # a failure logged since the last success
        self.db: Optional[sqlite3.Connection] = None
        self.reader: Optional[sqlite3.Connection] = None
        self._opened_at = -_REOPEN_S
        self._flush = flush
        self._stop = threading.Event()
        self.open()
        self._thread: Optional[threading.Thread] = None
        if thread:
            self._thread = threading.Thread(target=self._run, name=f"stepwatch-{label.replace(' ', '-')}",
                                            daemon=True)
            self._thread.start()

    def open(self) -> None:
        self._opened_at = time.monotonic()
        try:
            self.db = open_db(self.directory, self._schema, timeout=self.lock_wait_s)
            self.reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                          timeout=self.read_wait_s)
        except (OSError, sqlite3.Error) as exc:
            close_db(self.db)
            self.db = self.reader = None
            self.fail("open", exc)

    def fail(self, what: str, exc: Exception) -> None:
        self.failures += 1
        if not self._logged:
            log.error("stepwatch collector: %s %s %s failed (%s); %s", self._label, self.path, what, exc, self._after)
        self._logged = True

    def read(self, sql: str, args: tuple) -> Optional[list]:
        """The rows of ``sql``, or None (not open, the read failed: counted, or one failed
        within ``read_backoff_s``: not tried). At 3,000 ranks first seen while another process
        held the file's lock, each read waiting ``read_wait_s`` would have held the event loop
        150 s."""
        if self.reader is None:
            return None
        if time.monotonic() < self._read_again_at:
            self.skipped += 1
            return None
        try:
            return self.reader.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            self._read_again_at = time.monotonic() + self.read_backoff_s
            self.fail("read", exc)
            return None

    def write(self, statements) -> bool:
        """``statements(db)`` in one transaction; False when it could not (not open, a lock held
        past ``lock_wait_s``, a full disk: counted)."""
        if self.db is None and time.monotonic() - self._opened_at >= _REOPEN_S:
            self.open()
        try:
            if self.db is None:
                raise sqlite3.OperationalError("not open")
            self.db.execute("BEGIN IMMEDIATE")
            try:
                statements(self.db)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, ValueError) as exc:
            if self.db is not None:
                self.fail("write", exc)
            return False
        self._logged = False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            try:
                self._flush()
            except Exception:  # noqa: BLE001 - the writer outlives one bad flush
                log.exception("stepwatch collector: %s flush failed", self._label)

    def close(self) -> None:
        """Stop the thread, flush what is held, close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lock_wait_s + self.flush_s + 1.0)
        self._flush()
        close_db(self.db)
        close_db(self.reader)
        self.db = self.reader = None


class DriftStore:
    """``load(job, rank)`` -> the state saved for that rank, or None; ``save(job, rank,
    state)``. Rows carry the wall clock of their save; ``max_age_s``: older rows are not
    restored (that job is gone). ``clock`` is injectable; ``thread=False``: no writer thread
    (``flush()`` by hand)."""

    def __init__(self, directory: str, max_age_s: float = 7 * 86400.0, clock=time.time, flush_s: float = 1.0,
                 lock_wait_s: float = 1.0, read_wait_s: float = 0.05, thread: bool = True):
        self.max_age_s, self._clock = max_age_s, clock
        self._pending: dict[tuple, tuple] = {}  # (job, rank) -> (state text, saved at)
        self._lock = threading.Lock()
        self.file = StoreFile(directory, _SCHEMA, "detection state", "detection goes on without it, saves are "
                              "tried again", self.flush, flush_s, lock_wait_s, read_wait_s, thread)
        self.path = self.file.path

    @property
    def failures(self) -> int:
        """Reads and flushes that failed."""
        return self.file.failures

    def load(self, job: str, rank: int) -> Optional[dict]:
        with self._lock:
            held = self._pending.get((job, rank))
        if held is not None:
            text, saved_at = held
        else:
            rows = self.file.read("SELECT state, saved_at FROM drift WHERE job = ? AND rank = ?", (job, rank))
            if not rows:
                return None
            text, saved_at = rows[0]
        if self._clock() - saved_at > self.max_age_s:
            return None
        try:
            state = json.loads(text)
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def save(self, job: str, rank: int, state: dict) -> None:
        """Keep ``state`` for the next flush (no I/O here)."""
        try:
            text = json.dumps(state)
        except ValueError as exc:
            self.file.fail("write", exc)
            return
        with self._lock:
            self._pending[(job, rank)] = (text, self._clock())

    def flush(self) -> bool:
        """Write what is pending in one transaction; True when nothing is left pending. On a
        failure the rows stay pending (a newer save of a row wins)."""
        with self._lock:
            rows, self._pending = self._pending, {}
        if not rows or self.file.write(lambda db: db.executemany(
                "REPLACE INTO drift (job, rank, state, saved_at) VALUES (?, ?, ?, ?)",
                [(job, rank, text, at) for (job, rank), (text, at) in rows.items()])):
            return True
        with self._lock:
            for key, row in rows.items():
                self._pending.setdefault(key, row)
        return False

    def close(self) -> None:
        """Stop the writer, write what is pending, close."""
        self.file.close()
