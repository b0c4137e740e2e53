"""The runs' records on disk: one SQLite table (``runs``) in the collector's ``state_dir``, next
to the drift state, the newest ``keep`` runs per job; in memory without a directory.

Never written on the collector's event loop: a save is a dict entry the store's own thread
writes every ``flush_s`` in one transaction (waiting at most ``lock_wait_s`` for another
process's lock); a read waits at most ``read_wait_s`` (then it answers from what this
collector holds). A failure (damaged, read-only, full, a lock held) is counted (``failures``),
logged once per run of failures, and the rows wait for the next flush: a store that could not
open tries again every 30 s. Until written, records are answered from memory (at most ``keep``
per job); an ended run's record is held there as its JSON text, zlib-compressed (it is saved
once and read only when asked for), so the ``keep`` runs of a job without a ``state_dir`` cost
~40 bytes a rank, not the ~600 of its dict (a churn of ten 100-rank jobs left 20 MB of such
dicts behind: bench/results/connection_churn_2core.md). Two collector replicas that share the
directory each write whole rows (one statement each) and never a torn one.
"""

from __future__ import annotations

import json
import threading
import zlib
from typing import Optional

from ._persist import StoreFile
from ._run_record import brief

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
        # job -> run -> (started_at, record not written yet: a dict, or an ended run's compressed JSON)
        self._memory: dict[str, dict[str, tuple]] = {}
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

    def runs(self, job: str, ranks: bool = True) -> list[dict]:
        """The job's runs, oldest first (at most ``keep``): those written, and those held.
        ``ranks=False``: the ended runs held in memory as :func:`~._run_record.brief` records (not
        decompressed: what choosing a run needs; :meth:`one` gives its whole record), the
        others whole."""
        with self._lock:
            held = list(self._memory.get(job, {}).items())
        out = {run: _record(entry, ranks) for run, entry in held}  # (decompressed outside the lock)
        rows = self.file.read("SELECT run, record FROM runs WHERE job = ?", (job,)) if self.file is not None else None
        for run, text in rows or ():
            rec = _parsed(text) if run not in out else None
            if rec is not None:
                out[run] = rec
        return sorted(out.values(), key=lambda r: float(r.get("started_at", 0)))[-self.keep:]

    def one(self, job: str, run: str) -> Optional[dict]:
        """The whole record of ``run``, or None."""
        with self._lock:
            entry = self._memory.get(job, {}).get(run)
        if entry is not None:
            return _record(entry)
        rows = (self.file.read("SELECT record FROM runs WHERE job = ? AND run = ?", (job, run))
                if self.file is not None else None)
        return next((_parsed(text) for (text,) in rows or ()), None)

    def save(self, record: dict) -> None:
        """Hold ``record`` and write it at the next flush (no I/O here). An ended run's is held as
        its compressed JSON with its head (its brief record): 0.24 s at its end, once, for a
        10,000-rank run with 40 settings (34 bytes a rank held; reading it whole again 0.17 s; this
        2-core machine)."""
        job, run = record["job"], record["run"]
        if record.get("ended_at") is None:
            entry = (float(record["started_at"]), None, record)
        else:
            head = brief(record)
            body = zlib.compress(json.dumps(record, separators=(",", ":")).encode(), 1)
            entry = (float(record["started_at"]), head, body)
        with self._lock:
            held = self._memory.setdefault(job, {})
            held[run] = entry
            for old in sorted(held, key=lambda k: held[k][0])[:-self.keep]:
                del held[old]
                self._dirty.discard((job, old))
            if self.file is not None:
                self._dirty.add((job, run))

    def flush(self) -> bool:
        """Write the records saved since the last flush; True when none is left to write."""
        with self._lock:
            todo = [(job, run, self._memory[job][run]) for job, run in self._dirty
                    if run in self._memory.get(job, {})]
            self._dirty = set()
        if not todo:
            return True

        def statements(db) -> None:
            for job, run, (started_at, _, body) in todo:
                db.execute("REPLACE INTO runs (job, run, started_at, record) VALUES (?, ?, ?, ?)",
                           (job, run, started_at, zlib.decompress(body).decode() if isinstance(body, bytes)
                            else json.dumps(body)))
            for job in {job for job, _, _ in todo}:
                db.execute("DELETE FROM runs WHERE job = ? AND run NOT IN (SELECT run FROM runs WHERE "
                           "job = ? ORDER BY started_at DESC LIMIT ?)", (job, job, self.keep))

        if not self.file.write(statements):
            with self._lock:
                self._dirty.update((job, run) for job, run, _ in todo)
            return False
        with self._lock:  # written: dropped from memory unless saved again meanwhile
            for job, run, entry in todo:
                held = self._memory.get(job, {})
                if (job, run) not in self._dirty and held.get(run) is entry:
                    del held[run]
        return True

    def close(self) -> None:
        """Stop the writer, write what is held, close."""
        if self.file is not None:
            self.file.close()


def _parsed(text: str) -> Optional[dict]:
    """A stored row's record, or None when it is not a JSON object."""
    try:
        rec = json.loads(text)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def _record(entry: tuple, ranks: bool = True) -> dict:
    """A held record: the dict of a live run, an ended run's decompressed (or its head)."""
    _, head, body = entry
    if not isinstance(body, bytes):
        return body
    return json.loads(zlib.decompress(body)) if ranks else head
