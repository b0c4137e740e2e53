"""On-disk spool of sealed batches that the collector has not acknowledged yet.

Layout: ``<spool_dir>/<job>/rank<rank>-<session_id>/<seq:016d>.pb``, one serialized Batch per
file, written to a temporary name and renamed so a reader never sees a partial file. The total
size is bounded by ``max_bytes``: the oldest batches are dropped first (counted in
``batches_dropped``); the newest batch is always kept. ``<dir>/seq`` holds the highest sequence
number written, so a sidecar that takes the session over (the trainer restarted a dead one)
continues the numbering even when everything was acknowledged: the collector drops a batch
whose number it has seen in that session.

When the disk refuses (full, read-only, no such directory) a batch is kept in memory instead,
under the same size bound, and :meth:`write` says so; the disk is tried again for every batch.

A file read back is checked before it is sent: an empty file, one that does not decode as a
Batch, or one whose seq field is not the seq of its name (damage that still decodes: one
flipped bit) is quarantined and counted, never sent.
"""

from __future__ import annotations

import os
import threading
from typing import List, Optional

from google.protobuf.message import DecodeError

from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core.contract import safe_name
from stepwatch.core.support import makedirs_private
from ._log import LOG

__all__ = ["Spool", "spool_path", "orphans", "LOG_FILE"]

_SUFFIX = ".pb"
_SEQ_FILE = "seq"
_OWNER_FILE = "owner"   # "<pid>": the sidecar writing this session's spool
_HELLO_FILE = "hello.pb"  # the session's Hello: a later sidecar can deliver what is left
LOG_FILE = "sidecar.log"  # what the sidecar said after its trainer exited (what it left here)


def spool_path(root: str, job: str, rank: int, session_id: str) -> str:
    """The spool directory of one session, always inside ``root``: names pass through
    :func:`~stepwatch.core.contract.safe_name`; one that is empty or only dots becomes '_'."""
    job_part = safe_name(job) or "_"
    session_part = safe_name(session_id) or "_"
    return os.path.join(root, job_part, f"rank{int(rank)}-{session_part}")


class Spool:
    """Thread-safe store of pending batches, keyed by sequence number.

    Existing ``*.pb`` files in ``path`` (a previous run of the same session) are adopted as
    pending. A directory that cannot be made or read leaves the spool in memory only.
    """

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._sizes: dict = {}
        self._dropped = 0
        self.quarantined = 0  # batches moved aside as unreadable or refused as malformed
        self._high = 0  # highest sequence number ever written in this session
        self._mem: dict = {}  # seq -> bytes of batches the disk refused
        self.write_errors = 0
        self.last_error = ""
        try:
            makedirs_private(path)
            names = os.listdir(path)
        except OSError as exc:
            self._refused(exc)
            names = []
        try:
            with open(os.path.join(path, _SEQ_FILE)) as fh:
                self._high = int(fh.read().strip() or 0)
        except (OSError, ValueError):
            pass
        for name in names:
            full = os.path.join(path, name)
            try:
                if name.endswith(_SUFFIX) and name[:-len(_SUFFIX)].isdigit():
                    self._sizes[int(name[:-len(_SUFFIX)])] = os.path.getsize(full)
                elif name.endswith(".tmp"):
                    os.unlink(full)
            except OSError:
                pass

    def claim(self, pid: int, hello: bytes) -> None:
        """Record the owning process and the session's Hello (for :func:`orphans`)."""
        for name, data in ((_OWNER_FILE, str(pid).encode()), (_HELLO_FILE, hello)):
            target = os.path.join(self.path, name)
            try:
                with open(target + ".tmp", "wb") as fh:
                    fh.write(data)
                os.replace(target + ".tmp", target)
            except OSError as exc:
                self._refused(exc)

    def _refused(self, exc: OSError) -> None:
        self.write_errors += 1
        self.last_error = f"{self.path}: {exc.strerror or exc}"

    def _file(self, seq: int) -> str:
        return os.path.join(self.path, f"{seq:016d}{_SUFFIX}")

    def write(self, seq: int, data: bytes) -> bool:
        """Store batch ``seq`` (serialized), then drop the oldest batches over the size limit.
        Returns False when the disk refused it and it is kept in memory (``last_error`` says
        why)."""
        tmp = self._file(seq) + ".tmp"
        on_disk = True
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self._file(seq))
        except OSError as exc:
            on_disk = False
            self._refused(exc)
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if seq > self._high:
            self._high = seq
            if on_disk:
                self._mark(seq)
        with self._lock:
            if not on_disk:
                self._mem[seq] = data
            self._sizes[seq] = len(data)
            self._enforce_limit()
        return on_disk

    def _mark(self, seq: int) -> None:
        marker = os.path.join(self.path, _SEQ_FILE)
        try:
            with open(marker + ".tmp", "w") as fh:
                fh.write(str(seq))
            os.replace(marker + ".tmp", marker)
        except OSError as exc:
            self._refused(exc)

    def _enforce_limit(self) -> None:
        """Caller holds the lock."""
        total = sum(self._sizes.values())
        while total > self._max_bytes and len(self._sizes) > 1:
            oldest = min(self._sizes)
            total -= self._sizes.pop(oldest)
            self._dropped += 1
            self._unlink(oldest)

    def _unlink(self, seq: int) -> None:
        if self._mem.pop(seq, None) is not None:
            return
        try:
            os.unlink(self._file(seq))
        except FileNotFoundError:
            pass
        except OSError as exc:
            LOG.warning("cannot remove spooled batch %s: %s", self._file(seq), exc)

    def read(self, seq: int) -> Optional[bytes]:
        """The stored bytes of ``seq``, or None when it was acked or dropped meanwhile, or could
        not be read (then it is quarantined: never retried in a loop)."""
        with self._lock:
            if seq not in self._sizes:
                return None
            held = self._mem.get(seq)
        if held is not None:
            return held
        try:
            with open(self._file(seq), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.quarantine(seq, f"unreadable: {exc.strerror or exc}")
            return None
        why = _damage(data, seq)
        if why:
            self.quarantine(seq, why)
            return None
        return data

    def quarantine(self, seq: int, why: str) -> None:
        """Move batch ``seq`` aside to ``<path>/quarantine/`` (kept for inspection, never sent
        again) and count it as dropped."""
        with self._lock:
            if self._sizes.pop(seq, None) is None:
                return
            self._dropped += 1
            self.quarantined += 1
            if self._mem.pop(seq, None) is not None:
                return  # a batch in memory: nothing to keep for inspection
        target = os.path.join(self.path, "quarantine")
        try:
            os.makedirs(target, exist_ok=True)
            os.replace(self._file(seq), os.path.join(target, os.path.basename(self._file(seq))))
        except OSError:
            self._unlink(seq)
        LOG.warning("spooled batch %d quarantined in %s: %s", seq, target, why)

    def ack(self, seq: int) -> None:
        """Forget batch ``seq`` (the collector applied it). Unknown numbers are ignored."""
        with self._lock:
            if self._sizes.pop(seq, None) is None:
                return
            if self._mem.pop(seq, None) is not None:
                return
            self._unlink(seq)

    def pending(self, after: int = 0) -> List[int]:
        """Sequence numbers still stored and greater than ``after``, in increasing order."""
        with self._lock:
            return sorted(s for s in self._sizes if s > after)

    @property
    def max_seq(self) -> int:
        """The highest sequence number written in this session (stored or acknowledged), 0
        for a new one."""
        with self._lock:
            return max(max(self._sizes, default=0), self._high)

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    @property
    def batches_dropped(self) -> int:
        with self._lock:
            return self._dropped

    def __len__(self) -> int:
        with self._lock:
            return len(self._sizes)

    def close(self) -> None:
        """Remove the directory when nothing is pending; otherwise leave the files and log
        where they are (a later run of this session, or an operator, may replay them), and how
        many unacknowledged batches were only in memory (the disk refused them): those are lost."""
        with self._lock:
            count, in_memory = len(self._sizes), len(self._mem)
        if in_memory:
            LOG.warning("%d unacknowledged batch(es) held in memory (the disk refused them: %s) are lost",
                        in_memory, self.last_error or "unknown error")
        if count - in_memory or self.quarantined:
            LOG.warning("%d unacknowledged batch(es) left in %s%s", count - in_memory, self.path,
                        f", {self.quarantined} quarantined in {self.path}/quarantine" if self.quarantined else "")
            return
        if count:
            return
        for name in (_SEQ_FILE, _OWNER_FILE, _HELLO_FILE, LOG_FILE):  # (delivered: its log said what was left)
            try:
                os.unlink(os.path.join(self.path, name))
            except OSError:
                pass
        for d in (self.path, os.path.dirname(self.path)):  # the session's folder, then the job's if empty
            try:
                os.rmdir(d)
            except OSError:
                break


def _damage(data: bytes, seq: int) -> str:
    """Why a spooled file's bytes must not be sent as batch ``seq`` ("" when they may)."""
    if not data:
        return "empty file"
    try:
        got = agent_pb2.Batch.FromString(data).seq
    except DecodeError as exc:
        return f"does not decode as a Batch ({exc})"
    return "" if got == seq else f"its seq field reads {got}, its name {seq}"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie nobody reaped, as under a container's init, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def orphans(root: str, job: str, rank: int, own: str) -> List[tuple]:
    """``[(path, hello bytes)]``: spools of earlier sessions of ``job``/``rank`` on this node
    whose sidecar is gone (a run that ended while the collector was down, a killed trainer),
    with batches left and the session's Hello recorded. Never raises."""
    parent = os.path.dirname(spool_path(root, job, rank, "x"))
    prefix = f"rank{int(rank)}-"
    found = []
    try:
        names = os.listdir(parent)
    except OSError:
        return found
    for name in sorted(names):
        path = os.path.join(parent, name)
        if not name.startswith(prefix) or os.path.abspath(path) == os.path.abspath(own):
            continue
        try:
            with open(os.path.join(path, _OWNER_FILE)) as fh:
                if _alive(int(fh.read().strip())):
                    continue
            with open(os.path.join(path, _HELLO_FILE), "rb") as fh:
                hello = fh.read()
            if any(n.endswith(_SUFFIX) for n in os.listdir(path)):
                found.append((path, hello))
        except (OSError, ValueError):
            continue
    return found
