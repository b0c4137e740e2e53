"""Trainer -> sidecar local IPC: :mod:`.contract` records over the sidecar's stdin pipe.

The write end is non-blocking. When the pipe is full (sidecar slow or stuck) records wait in
a bounded queue; beyond its bound the oldest are dropped and counted. Nothing here can block
or raise into the training loop: a dead sidecar turns the writer into a counting sink.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import Callable

from stepwatch.core.contract import encode

__all__ = ["PipeWriter"]

_log = logging.getLogger("stepwatch.agent")
_MAX_PENDING_BYTES = 1 << 16


class PipeWriter:
    """Buffers records and writes them to ``fd``. Training thread only (and atexit).

    ``interval_s`` amortizes the write syscall over several steps; ``max_records``
    bounds memory when the sidecar does not read.
    """

    def __init__(self, fd: int, max_records: int, interval_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self._fd = fd
        self._records: collections.deque = collections.deque()
        self._max_records = max_records
        self._interval = interval_s
        self._clock = clock
        self._last_flush = clock()
        self._out = bytearray()
        self.dropped = 0
        self.closed = False

    def put(self, record: dict) -> None:
        if self.closed:
            self.dropped += 1
            return
        if len(self._records) >= self._max_records:
            self._records.popleft()
            self.dropped += 1
        self._records.append(record)

    def maybe_flush(self) -> bool:
        """Flush when ``interval_s`` has passed; True when it did."""
        now = self._clock()
        if now - self._last_flush >= self._interval:
            self._last_flush = now
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """Encode queued records and write what the pipe takes now; keep the rest."""
        if self.closed:
            return
        while self._records and len(self._out) < _MAX_PENDING_BYTES:
            self._out += encode(self._records.popleft())
        while self._out:
            try:
                written = os.write(self._fd, self._out)
            except BlockingIOError:
                return
            except OSError as exc:  # BrokenPipeError: the sidecar is gone
                _log.warning("stepwatch: sidecar pipe closed (%s); telemetry is dropped until the "
                             "sidecar is restarted", exc)
                self._sink()
                return
            del self._out[:written]

    def drain(self, timeout_s: float) -> None:
        """Flush until everything is written or ``timeout_s`` passed (exit path only)."""
        deadline = self._clock() + timeout_s
        self.flush()
        while (self._records or self._out) and not self.closed and self._clock() < deadline:
            time.sleep(0.01)
            self.flush()

    def close(self) -> None:
        """Final flush, then close the pipe so the sidecar sees EOF. Idempotent."""
        if self.closed:
            return
        self.flush()
        self._sink()

    def _sink(self) -> None:
        self.dropped += len(self._records) + self._out.count(b"\n")
        self._records.clear()
        self._out.clear()
        self.closed = True
        try:
            os.close(self._fd)
        except OSError:
            pass

    def abandon(self) -> None:
        """In a forked child: close our copy of the fd without writing anything."""
        self._sink()
