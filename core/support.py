"""Small helpers shared by every long-lived part of stepwatch (sidecar threads, collector
tasks, tools): jittered exponential backoff, bounded log-once, and the gRPC channel to a
collector (plain, TLS, or mutual TLS), the per-user private default directories. Pure apart
from logging, reading PEM files and making directories."""

from __future__ import annotations

import logging
import os
import random
import stat
import threading
from typing import Hashable, Optional

__all__ = ["backoff_delay", "OnceLog", "collector_channel", "read_pem", "makedirs_private", "user_tmp"]


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 30.0,
                  rng: Optional[random.Random] = None) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)] seconds.
    ``attempt`` counts consecutive failures from 0."""
    ceiling = min(cap, base * (2 ** min(attempt, 62)))
    return (rng or random).uniform(0.0, ceiling)


class OnceLog:
    """Logs a message the first time its key is seen; later ones with the same key are dropped.

    Thread-safe. At most ``max_keys`` keys are remembered; beyond that the memory is cleared
    and everything is logged once more, rather than memory growing without bound.
    """

    def __init__(self, logger: logging.Logger, max_keys: int = 1000) -> None:
        self._logger = logger
        self._seen: set = set()
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def log(self, level: int, key: Hashable, msg: str, *args: object,
            exc_info: bool = False) -> bool:
        """Log unless ``key`` was logged before; return True when it was logged."""
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= self._max_keys:
                self._seen.clear()
            self._seen.add(key)
        self._logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def clear(self) -> None:
        """Let every key be logged again (e.g. a new outage after a healthy period)."""
        with self._lock:
            self._seen.clear()

    def forget(self, key: Hashable) -> None:
        """Let ``key`` be logged again (e.g. after the condition cleared)."""
        with self._lock:
            self._seen.discard(key)


def user_tmp(name: str) -> str:
    """``<temp dir>/stepwatch-<uid>/<name>``: a default directory of this user only (other
    users of the host neither see nor block it); made private by :func:`makedirs_private`."""
    import tempfile

    who = os.getuid() if hasattr(os, "getuid") else (os.environ.get("USERNAME") or "user")
    return os.path.join(tempfile.gettempdir(), f"stepwatch-{who}", name)


def makedirs_private(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, every directory it creates mode 0700 (only the
    owner may list or enter it). Directories of this user's own temp root (:func:`user_tmp`),
    the root included, must then be this user's, with no group or other access and no symbolic
    link among them: else PermissionError naming the path and what is wrong (on a shared login
    node another user can create ``/tmp/stepwatch-<uid>`` first and read or replace what is
    written there). Other directories (ones the user named) are left as they are."""
    _check_private(path)  # (what exists, before anything is made inside it)
    _make_private(path)
    _check_private(path)


def _make_private(path: str) -> None:
    missing = []
    head = os.path.abspath(path)
    while head and not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


def _check_private(path: str) -> None:
    if not hasattr(os, "getuid"):
        return
    root = os.path.dirname(user_tmp("-"))
    full = os.path.abspath(path)
    if full != root and not full.startswith(root + os.sep):
        return
    uid, d = os.getuid(), root
    for part in [""] + os.path.relpath(full, root).split(os.sep):
        d = os.path.join(d, part) if part and part != "." else d
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            return  # (not made yet: made 0700)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise PermissionError(f"stepwatch: {d} is not a directory of its own (a symbolic link or a file): "
                                  f"remove it, or set another directory")
        if st.st_uid != uid:
            raise PermissionError(f"stepwatch: {d} belongs to uid {st.st_uid}, not to this user (uid {uid}): "
                                  f"another user made it; remove it, or set another directory")
        if st.st_mode & 0o077:
            raise PermissionError(f"stepwatch: {d} has mode {stat.S_IMODE(st.st_mode):04o}: its group or others may "
                                  f"read or replace what stepwatch writes there; chmod 700 it, or remove it")


def read_pem(path: str, what: str) -> bytes:
    """The bytes of a PEM file; ValueError naming ``what`` and the path when unreadable."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ValueError(f"{what} {path!r}: cannot read: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in data:
        raise ValueError(f"{what} {path!r}: not a PEM file")
    return data


def collector_channel(target: str, tls: bool = False, ca: str = "", cert: str = "", key: str = "",
                      options: Optional[list] = None):
    """A gRPC channel to a collector: TLS when ``tls`` or any of the files is given (``ca``:
    PEM of the CA to trust, else the system's roots; ``cert``/``key``: a client certificate
    for mutual TLS), else plain. ValueError for an unreadable file."""
    import grpc  # noqa: PLC0415 - only the sidecar and the tools open channels

    if not (tls or ca or cert or key):
        return grpc.insecure_channel(target, options=options)
    if bool(cert) != bool(key):
        raise ValueError("a client certificate needs both tls_cert and tls_key")
    creds = grpc.ssl_channel_credentials(
        root_certificates=read_pem(ca, "tls_ca") if ca else None,
        private_key=read_pem(key, "tls_key") if key else None,
        certificate_chain=read_pem(cert, "tls_cert") if cert else None)
    return grpc.secure_channel(target, creds, options=options)
