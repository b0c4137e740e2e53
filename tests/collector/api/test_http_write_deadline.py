"""HTTP clients that never read are cut off: a real HttpServer on loopback answering 64 MiB,
clients that send their request and never read (a stuck dashboard, an attacker), and one that
reads. Each stuck one is aborted after write_timeout_s with its buffered answer freed; the
reader gets every byte."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time

import pytest

from stepwatch.collector.api import HttpServer

BODY = b"x" * (64 << 20)  # well over what the kernel buffers of a loopback connection hold


@contextlib.contextmanager
def _serving(server: HttpServer):
    """The server on a loopback port, on an event loop thread of its own: yields the port, then
    stops it."""
    loop = asyncio.new_event_loop()
    started: dict = {}
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        started["port"] = loop.run_until_complete(server.start("127.0.0.1", 0))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    async def shutdown() -> None:  # as asyncio.run ends: the answers still being written too
        await server.stop()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    try:
        yield started["port"]
    finally:
        # (a task left pending on a stopped loop is destroyed at a later garbage collection, and
        # the error it logs then, inside another module's compile, broke pytest's run)
        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _ask(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock


def test_a_client_that_never_reads_is_cut_off_and_a_reader_gets_everything():
    server = HttpServer({"/big": lambda: (200, "application/octet-stream", BODY)}, write_timeout_s=0.5)
    with _serving(server) as port:
        stuck = [_ask(port) for _ in range(5)]
        deadline = time.monotonic() + 30
        while server.cut_off < len(stuck):
            assert time.monotonic() < deadline, server.cut_off
            time.sleep(0.1)
        for sock in stuck:  # what the kernel buffers held at the abort, then a reset or an early end
            got = 0
            try:
                while chunk := sock.recv(1 << 20):
                    got += len(chunk)
            except ConnectionResetError:
                pass
            assert got < len(BODY), got
            sock.close()
        reader = socket.create_connection(("127.0.0.1", port), timeout=10)
        reader.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        data = bytearray()
        while chunk := reader.recv(1 << 20):
            data += chunk
        reader.close()
        head, _, body = bytes(data).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and body == BODY and server.cut_off == len(stuck)


def _send_queue(local_port: int, remote_port: int) -> int:
    """Bytes in the kernel's send queue of the loopback TCP socket local_port -> remote_port."""
    with open("/proc/net/tcp") as fh:
        next(fh)
        for line in fh:
            f = line.split()
            if int(f[1].split(":")[1], 16) == local_port and int(f[2].split(":")[1], 16) == remote_port:
                return int(f[4].split(":")[0], 16)
    raise AssertionError(f"no socket {local_port} -> {remote_port}")


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc/net/tcp")
def test_a_client_that_never_reads_holds_a_bounded_kernel_buffer():
    """The server's send buffer is fixed (no autotuning up to tcp_wmem's MiBs): a stuck reader's
    connection holds at most about twice _SEND_BUFFER in the kernel, however large the answer."""
    from stepwatch.collector.api._http_server import _SEND_BUFFER

    server = HttpServer({"/big": lambda: (200, "application/octet-stream", BODY)}, write_timeout_s=30)
    with _serving(server) as port:
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", port))
        stuck.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        mine = stuck.getsockname()[1]
        queued, deadline = [], time.monotonic() + 10
        while time.monotonic() < deadline:  # until the queue stops growing
            queued.append(_send_queue(port, mine))
            if len(queued) >= 10 and queued[-1] == queued[-10] and queued[-1] > 0:
                break
            time.sleep(0.1)
        assert 0 < queued[-1] <= 2 * _SEND_BUFFER + (64 << 10), queued[-10:]
        stuck.close()
