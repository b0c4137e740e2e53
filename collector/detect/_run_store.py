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
import threading
from typing import Optional

from ._persist import StoreFile

__all__ = ["RunStore"]

_SCHEMA = ("CREATE TABLE IF NOT EXISTS runs (job TEXT NOT NULL, run TEXT NOT NULL, started_at REAL NOT NULL, "
           "record TEXT NOT NULL, PRIMARY KEY (job, run))")


class RunStore:
    """The runs' records: ``runs(job)`` oldest first, ``save(record)``. ``directory`` None: in
    memory only. ``thread=False``: no writer thread (``flush()`` by hand)."""

    def __init__(self, directory: Optional[str], keep: int = 50, flush_s: float = 1.0, lock_wait_s: float = 1.0,
                 read_wait_s: float = 0.05, thread: bool = True):
        self.keep, self.directory = keep, directory
        self._lock = threading.Lock()
        self._memory: dict[str, dict[str, dict]] = {}  # job -> run -> record not written (yet)
        self._dirty: set = set()  # (job, run) to write
        self.file: Optional[StoreFile] = None
        if directory:
            self.file = StoreFile(directory, _SCHEMA, "run records", "runs are kept in memory and written when it "
                                  "can", self.flush, flush_s, lock_wait_s, read_wait_s, thread)
        self.path = self.file.path if self.file is not None else ":memory:"

    @property
    def failures(self) -> int:
        """Reads and flushes that failed."""
        return self.file.failures if self.file is not None else 0

    def runs(self, job: str) -> list[dict]:
        """The job's runs, oldest first (at most ``keep``): those written, and those held."""
        with self._lock:
            out = dict(self._memory.get(job, {}))
        rows = self.file.read("SELECT run, record FROM runs WHERE job = ?", (job,)) if self.file is not None else None
        for run, text in rows or ():
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
            if self.file is not None:
                self._dirty.add((job, run))

    def flush(self) -> bool:
        """Write the records saved since the last flush; True when none is left to write."""
        with self._lock:
            todo = [(job, run, dict(self._memory[job][run])) for job, run in self._dirty
                    if run in self._memory.get(job, {})]
            self._dirty = set()
        if not todo:
            return True

        def statements(db) -> None:
            for job, run, rec in todo:
                db.execute("REPLACE INTO runs (job, run, started_at, record) VALUES (?, ?, ?, ?)",
                           (job, run, float(rec["started_at"]), json.dumps(rec)))
            for job in {job for job, _, _ in todo}:
                db.execute("DELETE FROM runs WHERE job = ? AND run NOT IN (SELECT run FROM runs WHERE "
                           "job = ? ORDER BY started_at DESC LIMIT ?)", (job, job, self.keep))

        if not self.file.write(statements):
            with self._lock:
                self._dirty.update((job, run) for job, run, _ in todo)
            return False
        with self._lock:  # written: dropped from memory unless saved again meanwhile
            for job, run, rec in todo:
                held = self._memory.get(job, {})
                if (job, run) not in self._dirty and held.get(run) == rec:
                    del held[run]
        return True

    def close(self) -> None:
        """Stop the writer, write what is held, close."""
        if self.file is not None:
            self.file.close()
