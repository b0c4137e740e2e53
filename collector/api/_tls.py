"""TLS for the collector's two listeners from its settings (``tls_cert``, ``tls_key``,
``tls_client_ca``): the PEM files gRPC takes, and the HTTPS context (the same certificate,
client certificates required with a client CA). None for both without ``tls_cert``."""

from __future__ import annotations

import ssl
from typing import Optional

from stepwatch.core.support import read_pem

__all__ = ["tls_files", "ssl_context"]


def tls_files(settings) -> Optional[tuple]:
    """(cert, key, client CA or None) PEM bytes for gRPC, or None without TLS."""
    s = settings
    if not s.tls_cert:
        return None
    return (read_pem(s.tls_cert, "tls_cert"), read_pem(s.tls_key, "tls_key"),
            read_pem(s.tls_client_ca, "tls_client_ca") if s.tls_client_ca else None)


def ssl_context(settings) -> Optional[ssl.SSLContext]:
    """The HTTPS context, or None for plain HTTP."""
    s = settings
    if not s.tls_cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(s.tls_cert, s.tls_key)
    if s.tls_client_ca:
        ctx.load_verify_locations(s.tls_client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
