"""HTTP clients that never read are cut off: a real HttpServer on loopback answering 64 MiB,
clients that send their request and never read (a stuck dashboard, an attacker), and one that
reads. Each stuck one is aborted after write_timeout_s with its buffered answer freed; the
reader gets every byte."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from stepwatch.collector.api import HttpServer

BODY = b"x" * (64 << 20)  # well over what the kernel buffers of a loopback connection hold


def _serve(server: HttpServer) -> tuple[int, asyncio.AbstractEventLoop, threading.Thread]:
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
    return started["port"], loop, thread


def _ask(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock


def test_a_client_that_never_reads_is_cut_off_and_a_reader_gets_everything():
    server = HttpServer({"/big": lambda: (200, "application/octet-stream", BODY)}, write_timeout_s=0.5)
    port, loop, thread = _serve(server)
    try:
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
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
