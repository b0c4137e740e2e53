"""Entry point: ``python -m stepwatch.agent._sidecar`` (started by the trainer's attach()).

Reads the config from the first stdin line, then runs the sidecar until stdin ends, a "bye"
record arrives, the trainer exits, or SIGTERM. Exit status: 0 after a clean shutdown (even
with batches left in the spool), 2 for an unusable config.

stdout is the back channel to the trainer (:mod:`._backchannel`): its file descriptor is
taken over first thing and fd 1 is pointed at stderr, so a stray print from any library
lands in the log instead of corrupting the channel.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from typing import Optional

from stepwatch.core import contract
from ._backchannel import BackChannel
from ._config import ConfigError, SidecarConfig
from ._log import LOG, setup_logging
from ._sidecar import Sidecar


def _read_config(lines) -> SidecarConfig:
    line = next(lines, None)
    if line is None:
        raise ConfigError("stdin closed before the config line")
    try:
        obj = contract.decode(line)
    except ValueError as exc:
        raise ConfigError(f"config line is not a record: {exc}") from None
    return SidecarConfig.from_record(obj)


def _take_stdout() -> Optional[int]:
    """A private duplicate of fd 1 for the back channel (None when there is no stdout);
    fd 1 itself then refers to stderr."""
    try:
        sys.stdout.flush()
        channel_fd = os.dup(1)
    except (OSError, ValueError, AttributeError):
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        pass
    return channel_fd


def main() -> int:
    channel = BackChannel(_take_stdout())
    stdin = contract.read_lines(sys.stdin.fileno())
    setup_logging(rank=-1, level=logging.WARNING)
    try:
        config = _read_config(stdin)
    except ConfigError as exc:
        LOG.error("cannot start: %s", exc)
        return 2
    setup_logging(rank=config.hello.rank, level=config.log_level_number)
    try:
        sidecar = Sidecar(config, stdin, channel=channel)
    except OSError as exc:
        LOG.error("cannot start: %s", exc)
        return 2
    atexit.register(sidecar.shutdown)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda num, _frame: sidecar.request_stop(signal.Signals(num).name))
    sidecar.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
