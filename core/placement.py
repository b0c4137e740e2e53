"""Which collector replica a job's ranks talk to: rendezvous hashing of the job name.

Cross-rank detection (stragglers, skew) needs every rank of a job on one collector, so the
choice must be the same on every rank without any coordination. Each rank scores every
candidate replica with a hash of (job, replica) and takes the highest (highest random weight,
Thaler & Ravishankar): every rank of a job computes the same ranking, a replica that leaves
moves only its own jobs (each to its second choice), and one that joins takes over only the
jobs it now scores highest, about 1/n of them.

Candidates come from the ``collector`` setting: ``HOST:PORT`` entries separated by commas, each
resolved. A name with several addresses (a Kubernetes headless Service publishes one per ready
pod) gives one candidate per address; a name with one address, or an IP, is one candidate
under its own name (stable across pod restarts, so list StatefulSet pod names for the least
movement). A single entry resolving to a single address is the plain one-collector case: the
target is passed to gRPC unchanged. Resolution is refreshed every ``refresh_s``; a replica the
caller reports failed (:meth:`failed`) is passed over for ``down_s`` and then tried again, so
a job returns to its replica when it is back.

Thread-safe. Pure apart from DNS lookups.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
import threading
import time
from typing import Callable, Optional

from .settings import parse_hostport

__all__ = ["Placement", "parse_collectors", "score"]


def parse_collectors(raw) -> str:
    """``HOST:PORT[,HOST:PORT...]``; ValueError naming the bad entry."""
    entries = [e.strip() for e in str(raw).split(",")]
    if not all(entries):
        raise ValueError("expected HOST:PORT entries separated by commas (an entry is empty)")
    for entry in entries:
        try:
            parse_hostport(entry)
        except ValueError:
            raise ValueError(f"{entry!r}: expected HOST:PORT with a port in 0..65535") from None
    return ",".join(entries)


def score(job: str, replica: str) -> int:
    """The rendezvous weight of ``replica`` for ``job`` (64 bits of BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(f"{job}\0{replica}".encode(), digest_size=8).digest(), "big")


def _split(entry: str) -> tuple[str, int]:
    host, _, port = entry.rpartition(":")
    return host.strip("[]"), int(port)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` of one family: the family with the most (IPv4 on a tie), so a
    dual-stack name such as localhost (one IPv4, one IPv6 address) is one host, not two."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    v4 = sorted({i[4][0] for i in infos if i[0] == socket.AF_INET})
    v6 = sorted({i[4][0] for i in infos if i[0] == socket.AF_INET6})
    return v4 if len(v4) >= len(v6) else v6


class Placement:
    """Candidates from ``targets``; :meth:`choose` gives the replica for a job."""

    def __init__(self, targets: str, refresh_s: float = 30.0, down_s: float = 30.0,
                 resolve: Callable[[str, int], list] = _resolve, clock: Callable[[], float] = time.monotonic):
        self._entries = parse_collectors(targets).split(",")
        self.refresh_s, self.down_s = refresh_s, down_s
        self._resolve, self._clock = resolve, clock
        self._lock = threading.Lock()
        self._by_entry: dict[str, list[str]] = {}
        self._resolved_at: Optional[float] = None
        self._down: dict[str, float] = {}

    @property
    def single(self) -> bool:
        """One entry: nothing to choose unless its name resolves to several addresses."""
        return len(self._entries) == 1 and len(self.candidates()) == 1

    def candidates(self) -> list[str]:
        """Every replica now known, sorted (refreshed every ``refresh_s``)."""
        with self._lock:
            now = self._clock()
            if self._resolved_at is None or now - self._resolved_at >= self.refresh_s:
                self._resolved_at = now
                for entry in self._entries:
                    self._by_entry[entry] = self._lookup(entry)
            return sorted({c for cands in self._by_entry.values() for c in cands})

    def _lookup(self, entry: str) -> list[str]:
        host, port = _split(entry)
        if _is_ip(host):
            return [entry]
        try:
            addresses = self._resolve(host, port)
        except OSError:
            # Not resolvable now: keep what it gave before, else the name itself (gRPC
            # resolves it again and reports the failure).
            return self._by_entry.get(entry) or [entry]
        if len(addresses) <= 1:
            return [entry]
        return [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses]

    def ranked(self, job: str) -> list[str]:
        """Candidates by rendezvous weight for ``job``, highest first."""
        return sorted(self.candidates(), key=lambda c: score(job, c), reverse=True)

    def choose(self, job: str) -> str:
        """The highest-weighted candidate not passed over; the highest when all are."""
        ranked = self.ranked(job)
        now = self._clock()
        with self._lock:
            for cand in ranked:
                until = self._down.get(cand)
                if until is None or until <= now:
                    return cand
        return ranked[0]

    def failed(self, target: str) -> None:
        """``target`` could not be reached: pass it over for ``down_s``."""
        with self._lock:
            self._down[target] = self._clock() + self.down_s

    def reached(self, target: str) -> None:
        with self._lock:
            self._down.pop(target, None)
