"""The back channel to the trainer: JSON lines on the sidecar's stdout.

Messages (one line each, flushed)::

    {"t":"window_result","window_id":N,"gpu_event_count":K}   after a window was analysed
    {"t":"capture","request_id":"..","steps":N}               the collector asked for a trace

The trainer reads the pipe non-blocking at step boundaries, so it may not read for a while:
writes happen on a dedicated daemon thread ("stepwatch-backchannel") and only that thread
can block on a full pipe. :meth:`BackChannel.send` never blocks; beyond ``capacity`` queued
messages the oldest is dropped and counted. Once a write fails (the trainer is gone, or
stdout was closed) the channel goes quiet for good.
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Optional

from stepwatch.core.contract import encode
from ._log import LOG
from ._service import Service

__all__ = ["BackChannel"]


class BackChannel(Service):
    """Writes messages to file descriptor ``fd`` (owned: closed by :meth:`stop`).
    ``fd`` None makes a channel that discards everything. Thread-safe."""

    def __init__(self, fd: Optional[int], capacity: int = 256) -> None:
        super().__init__("stepwatch-backchannel")
        self._fd = fd
        self._queue: collections.deque = collections.deque(maxlen=capacity)
        self._cond = threading.Condition()
        self._closed = fd is None
        self.dropped = 0
        self.sent = 0

    def start(self) -> None:
        if self._fd is not None:
            self._thread.start()

    def send(self, message: dict) -> None:
        """Queue one message (any thread, never blocks); ignored once the channel is broken."""
        line = encode(message)
        with self._cond:
            if self._closed:
                return
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append(line)
            self._cond.notify()

    def _wake(self) -> None:
        """:meth:`stop`: write what is queued (until the deadline), then close the fd."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    break
                line = self._queue.popleft()
            if not self._write(line):
                break
        self._shut()

    def _write(self, line: bytes) -> bool:
        try:
            while line:
                line = line[os.write(self._fd, line):]
        except OSError as exc:  # BrokenPipeError included: SIGPIPE is ignored in Python
            LOG.info("back channel to the trainer closed: %s", exc)
            return False
        self.sent += 1
        return True

    def _shut(self) -> None:
        with self._cond:
            self._closed = True
            self.dropped += len(self._queue)
            self._queue.clear()
        try:
            os.close(self._fd)
        except OSError:
            pass
