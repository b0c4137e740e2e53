"""PipeWriter on a real pipe: non-blocking, bounded, drop-oldest, dead reader."""

import json
import os

from stepwatch.agent._ipc import PipeWriter


def read_all(fd):
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_records_arrive_as_json_lines():
    r, w = os.pipe()
    os.set_blocking(w, False)
    os.set_blocking(r, False)
    writer = PipeWriter(w, 100, 0.0)
    for i in range(10):
        writer.put({"t": "step", "step": i})
    writer.flush()
    lines = read_all(r).splitlines()
    assert [json.loads(x)["step"] for x in lines] == list(range(10))
    writer.close()
    assert os.read(r, 10) == b""  # EOF reaches the reader
    os.close(r)


def test_full_pipe_never_blocks_and_drops_oldest():
    r, w = os.pipe()
    os.set_blocking(w, False)
    os.set_blocking(r, False)
    writer = PipeWriter(w, 1000, 0.0)
    for i in range(20000):  # far more than a 64 KiB pipe holds; nobody reads
        writer.put({"t": "step", "step": i, "pad": "x" * 40})
        writer.flush()
    assert writer.dropped > 0
    # The reader wakes up: everything that arrives is whole JSON lines in order, and the
    # bounded queue kept the newest records.
    data = read_all(r)
    for _ in range(1000):
        writer.flush()
        chunk = read_all(r)
        if not chunk:
            break
        data += chunk
    steps = [json.loads(x)["step"] for x in data.splitlines()]
    assert steps == sorted(steps) and steps[-1] == 19999
    assert len(steps) + writer.dropped == 20000
    writer.close()
    os.close(r)


def test_dead_reader_turns_writer_into_counting_sink():
    r, w = os.pipe()
    os.set_blocking(w, False)
    os.close(r)
    writer = PipeWriter(w, 10, 0.0)
    writer.put({"t": "step"})
    writer.flush()  # EPIPE (SIGPIPE is ignored by Python) -> no exception
    assert writer.closed
    writer.put({"t": "step"})
    assert writer.dropped == 2
