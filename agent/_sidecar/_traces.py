"""Traces captured on command: gzip into the trace directory, retention, TraceRef.

Layout: ``<trace_dir>/<job>/<request_id>/rank<R>.json.gz``. ``job`` and ``request_id`` come
from outside (the collector names requests), so both are reduced to ``[A-Za-z0-9._-]`` and
names made only of dots are refused: nothing is ever written outside ``trace_dir``.
Retention only ever deletes files named ``rank<N>.json.gz`` two levels below ``trace_dir``.
Everything here runs on the "stepwatch-traces" worker thread, never on the reader thread.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
from typing import List, Tuple

from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core.contract import safe_name
from stepwatch.core.support import makedirs_private
from ._log import LOG
from ._records import TraceJob

__all__ = ["TraceArchive"]

_RANK_FILE = re.compile(r"^rank\d+\.json\.gz$")
# Level 1: ~4x faster than the default 6 for ~20% more bytes; the CPU on a training node
# belongs to the trainer's data loading.
_GZIP_LEVEL = 1
_CHUNK = 1 << 20


class TraceArchive:
    """Moves captured traces into ``trace_dir`` and keeps it within ``max_files`` files and
    ``max_bytes`` bytes (oldest removed first; the file just written is always kept)."""

    def __init__(self, trace_dir: str, job: str, rank: int, max_bytes: int,
                 max_files: int) -> None:
        self.trace_dir = os.path.abspath(trace_dir)
        self.job = safe_name(job) or "job"
        self.rank = rank
        self.max_bytes = max_bytes
        self.max_files = max_files

    def store(self, job: TraceJob) -> agent_pb2.TraceRef:
        """Archive one capture and return its TraceRef; a failure becomes ``error``. The
        trainer's exported file is deleted in every case."""
        ref = agent_pb2.TraceRef(request_id=job.request_id, first_step=job.first_step,
                                 last_step=job.last_step)
        try:
            if job.error:
                ref.error = job.error
            else:
                ref.path, ref.bytes = self._write(job)
                self.enforce_retention(keep=ref.path)
        except (OSError, ValueError, EOFError) as exc:
            ref.ClearField("path")
            ref.bytes = 0
            ref.error = f"archiving the trace failed: {exc}"[:500]
            LOG.warning("trace %s: %s", job.request_id, ref.error)
        finally:
            _remove(job.path)
        return ref

    def destination(self, request_id: str) -> str:
        """Absolute path of this rank's file for ``request_id``; ValueError when the id is
        unusable as a file name."""
        safe = safe_name(request_id)
        if safe is None:
            raise ValueError(f"request_id {request_id!r:.80} is not usable as a file name")
        path = os.path.join(self.trace_dir, self.job, safe, f"rank{self.rank}.json.gz")
        if os.path.dirname(os.path.dirname(os.path.dirname(path))) != self.trace_dir:
            raise ValueError(f"request_id {request_id!r:.80} escapes the trace directory")
        return path

    def _write(self, job: TraceJob) -> Tuple[str, int]:
        dest = self.destination(job.request_id)
        makedirs_private(os.path.dirname(dest))
        tmp = dest + ".tmp"
        try:
            with open(job.path, "rb") as src:
                gzipped = src.read(2) == b"\x1f\x8b"
                src.seek(0)
                with open(tmp, "wb") as raw:
                    if gzipped:  # already compressed by the exporter: copy as is
                        shutil.copyfileobj(src, raw, _CHUNK)
                    else:
                        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=_GZIP_LEVEL) as dst:
                            shutil.copyfileobj(src, dst, _CHUNK)
            os.replace(tmp, dest)
        finally:
            _remove(tmp)
        return dest, os.path.getsize(dest)

    def enforce_retention(self, keep: str = "") -> List[str]:
        """Delete the oldest archived traces (by mtime) beyond the limits; ``keep`` is never
        deleted. Files vanishing meanwhile (another rank's sidecar) are fine. Returns the
        deleted paths."""
        files = sorted(self._archived())
        total = sum(size for _, size, _ in files)
        removed = []
        for _mtime, size, path in files:
            if len(files) - len(removed) <= self.max_files and total <= self.max_bytes:
                break
            if path == keep:
                continue
            if _remove(path):
                removed.append(path)
                total -= size
                _rmdir_empty(os.path.dirname(path))
        return removed

    def _archived(self) -> List[Tuple[float, int, str]]:
        out = []
        for job_dir in _listdir(self.trace_dir):
            for req_dir in _listdir(job_dir):
                for path in _listdir(req_dir):
                    if _RANK_FILE.match(os.path.basename(path)):
                        try:
                            st = os.stat(path)
                        except OSError:
                            continue
                        out.append((st.st_mtime, st.st_size, path))
        return out


def _listdir(path: str) -> List[str]:
    try:
        return [os.path.join(path, name) for name in os.listdir(path)]
    except OSError:
        return []


def _remove(path: str) -> bool:
    if not path:
        return False
    try:
        os.remove(path)
        return True
    except OSError:
        return False


def _rmdir_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
