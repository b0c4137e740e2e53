"""Reads the trainer's stdin records on the "stepwatch-reader" thread."""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from stepwatch.core import contract
from ._log import LOG
from ._service import Service
from ._records import Record, RecordError, parse_line

__all__ = ["Reader"]

class Reader(Service):
    """Decodes each line of ``lines`` and hands it to ``on_record`` (on the reader thread).

    A malformed line calls ``on_malformed()`` and is logged once per kind of error. End of
    input or a "bye" record calls ``on_eof()`` once and ends the thread. Exceptions raised by
    the callbacks are logged, never fatal. :meth:`stop` cannot interrupt a blocked read: the
    thread is a daemon and ends with the process or at end of input.
    """

    def __init__(self, lines: Iterable[bytes], on_record: Callable[[Record], None],
                 on_malformed: Callable[[], None], on_eof: Callable[[str], None]) -> None:
        super().__init__("stepwatch-reader")
        self._lines = lines
        self._on_record = on_record
        self._on_malformed = on_malformed
        self._on_eof = on_eof

    def _run(self) -> None:
        reason = "eof"
        try:
            for line in self._lines:
                if line.strip() and self._handle(line) == contract.BYE:
                    reason = "bye"
                    break
        except (OSError, ValueError) as exc:
            LOG.warning("reading stdin failed: %s", exc)
        finally:
            self._on_eof(reason)

    def _handle(self, line: bytes) -> str:
        try:
            record = parse_line(line)
        except RecordError as exc:
            self._on_malformed()
            self._once.log(logging.WARNING, exc.kind, "malformed record dropped: %s (line %r)",
                           exc, line[:200])
            return ""
        try:
            self._on_record(record)
        except Exception as exc:
            self._on_malformed()
            self._once.log(logging.WARNING, ("handler", record.t), "record %s not handled: %r",
                           record.t, exc)
        return record.t
