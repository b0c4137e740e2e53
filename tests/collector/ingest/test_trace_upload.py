"""Trace upload and download over real gRPC on loopback (AgentService.UploadTrace,
ControlService.DownloadTrace, GET /api/traces/<id>): what is kept, what is refused and how,
the size cap, and a restart over the same directory."""

from __future__ import annotations

import gzip
import json
import os

import grpc
import pytest

from stepwatch.agent._sidecar._upload import TraceUploader
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

KIB = 1 << 10


def gz(n_events: int) -> bytes:
    return gzip.compress(json.dumps({"traceEvents": [{"name": f"ev{i}", "ts": i, "ph": "X", "dur": 1}
                                                     for i in range(n_events)]}).encode(), compresslevel=1)


def issue(running, request_id: str, job: str, rank: int) -> None:
    """As a capture or an alert does: this collector asks ``rank`` of ``job`` for ``request_id``."""
    running.collector.state.traces.open(request_id, job, 1, [rank], running.clock())


def upload(running, chunks, token: str = "") -> agent_pb2.TraceStored:
    """Upload ``chunks``; the request their first chunk names is issued first."""
    chunks = list(chunks)
    if chunks and chunks[0].request_id and chunks[0].rank >= 0:
        issue(running, chunks[0].request_id, chunks[0].job, chunks[0].rank)
    with running.channel() as ch:
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        return agent_pb2_grpc.AgentServiceStub(ch).UploadTrace(iter(chunks), timeout=10, metadata=metadata)


def first(data: bytes, request_id: str = "req1", job: str = "job", rank: int = 0, total=None):
    return agent_pb2.TraceChunk(job=job, rank=rank, request_id=request_id,
                                total_bytes=len(data) if total is None else total, data=data)


def test_upload_by_the_sidecar_client_is_served_byte_for_byte(start_collector, tmp_path):
    running = start_collector()
    data = gzip.compress(os.urandom(5 << 19), compresslevel=1)  # 2.5 MiB: three 1 MiB chunks
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data)
    ref = agent_pb2.TraceRef(request_id="abc", path=str(path), bytes=len(data))
    issue(running, "abc", "my/job", 3)
    TraceUploader(running.collector.grpc_address, "", "my/job", 3).upload(ref)
    assert ref.trace_id == "my_job.abc.rank3" and not ref.upload_error
    status, ctype, body = running.get(f"/api/traces/{ref.trace_id}")
    assert (status, ctype, body) == (200, "application/gzip", data)
    with running.channel() as ch:
        chunks = list(agent_pb2_grpc.ControlServiceStub(ch).DownloadTrace(agent_pb2.TraceId(trace_id=ref.trace_id),
                                                                          timeout=10))
    assert len(chunks) == 3 and chunks[0].request_id == ref.trace_id
    assert b"".join(c.data for c in chunks) == data


def test_many_chunks_and_listing(start_collector):
    running = start_collector()
    data = gz(5_000)
    parts = [data[i:i + 100] for i in range(0, len(data), 100)]
    stored = upload(running, [first(parts[0], total=len(data))] + [agent_pb2.TraceChunk(data=p) for p in parts[1:]])
    assert stored.bytes == len(data)
    listed = json.loads(running.get("/api/traces")[2])["held"]
    assert [(h["trace_id"], h["bytes"], h["url"]) for h in listed] == \
        [("job.req1.rank0", len(data), "/api/traces/job.req1.rank0")]


@pytest.mark.parametrize("chunks, code, detail, reason", [
    (lambda d: [first(b"{not gzip}")], grpc.StatusCode.INVALID_ARGUMENT, "not gzip", "not_gzip"),
    (lambda d: [first(d, request_id="")], grpc.StatusCode.INVALID_ARGUMENT, "must name job", "invalid"),
    (lambda d: [first(d, rank=-1)], grpc.StatusCode.INVALID_ARGUMENT, "must name job", "invalid"),
    (lambda d: [], grpc.StatusCode.INVALID_ARGUMENT, "no TraceChunk", "invalid"),
    (lambda d: [first(d[:10], total=len(d))], grpc.StatusCode.INVALID_ARGUMENT, "announced", "invalid"),
    (lambda d: [first(d, total=10 << 20)], grpc.StatusCode.RESOURCE_EXHAUSTED, "per-trace limit", "too_large"),
    (lambda d: [first(d[:10], total=100)] + [agent_pb2.TraceChunk(data=b"x" * 4096)] * 300,
     grpc.StatusCode.RESOURCE_EXHAUSTED, "per-trace limit", "too_large"),
])
def test_bad_uploads_are_refused_clearly_and_nothing_partial_is_kept(start_collector, chunks, code, detail, reason):
    running = start_collector(trace_upload_max_bytes=1 << 20)
    with pytest.raises(grpc.RpcError) as err:
        upload(running, chunks(gz(2_000)))
    assert err.value.code() == code and detail in err.value.details(), err.value.details()
    assert json.loads(running.get("/api/traces")[2])["held"] == []
    assert os.listdir(running.collector.trace_store.directory) == []  # no .part left behind
    assert running.collector.trace_store.rejected.get(reason) == 1
    # the slot is free again: a good upload still works
    assert upload(running, [first(gz(10), request_id="ok")]).trace_id == "job.ok.rank0"


def test_wrong_token_is_refused_and_downloads_need_it_too(start_collector):
    running = start_collector(auth_token="s3cret")
    with pytest.raises(grpc.RpcError) as err:
        upload(running, [first(gz(10))], token="nope")
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    trace_id = upload(running, [first(gz(10))], token="s3cret").trace_id
    with running.channel() as ch, pytest.raises(grpc.RpcError) as err:
        list(agent_pb2_grpc.ControlServiceStub(ch).DownloadTrace(agent_pb2.TraceId(trace_id=trace_id), timeout=10))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_unknown_or_hostile_ids_are_not_found(start_collector):
    running = start_collector()
    for bad in ("nope", "..", "%2e%2e%2fetc%2fpasswd", "a%00b"):
        status, _, body = running.get(f"/api/traces/{bad}")
        assert status == 404 and b"no uploaded trace" in body, (bad, status)
    with running.channel() as ch, pytest.raises(grpc.RpcError) as err:
        list(agent_pb2_grpc.ControlServiceStub(ch).DownloadTrace(agent_pb2.TraceId(trace_id="../x"), timeout=10))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_size_cap_evicts_the_oldest_and_a_restart_keeps_the_rest(start_collector, tmp_path):
    store_dir = str(tmp_path / "kept")
    running = start_collector(trace_store_dir=store_dir, trace_store_max_bytes=1 << 20)
    blob = os.urandom(400 * KIB)
    data = gzip.compress(blob, compresslevel=1)  # random bytes stay ~400 KiB
    ids = [upload(running, [first(data, request_id=f"r{i}")]).trace_id for i in range(4)]
    held = [h["trace_id"] for h in json.loads(running.get("/api/traces")[2])["held"]]
    assert held == ids[:1:-1] and running.collector.trace_store.evicted == 2  # two newest, newest first
    assert running.get(f"/api/traces/{ids[0]}")[0] == 404
    with open(os.path.join(store_dir, "job.r9.rank0.json.gz.123.456.part"), "wb") as fh:
        fh.write(b"partial")  # as a killed collector would leave it
    again = start_collector(trace_store_dir=store_dir, trace_store_max_bytes=1 << 20)
    assert sorted(h["trace_id"] for h in json.loads(again.get("/api/traces")[2])["held"]) == sorted(ids[2:])
    assert not [n for n in os.listdir(store_dir) if n.endswith(".part")]
    assert again.get(f"/api/traces/{ids[3]}")[2] == data


def test_collector_down_ends_in_an_upload_error_after_retries(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gz(10))
    ref = agent_pb2.TraceRef(request_id="x", path=str(path))
    TraceUploader("127.0.0.1:9", "", "job", 0, attempts=2, first_delay_s=0.05, timeout_s=2).upload(ref)
    assert not ref.trace_id and ref.upload_error.startswith("upload failed: UNAVAILABLE"), ref.upload_error


def test_the_default_trace_store_is_this_collectors_own_and_removed_at_stop(tmp_path):
    """Two collectors on one host with the default trace_store_dir never share a store: each
    gets a private directory (mode 0700) of its own, removed when it stops."""
    import asyncio
    import stat

    from stepwatch.collector import Collector
    from stepwatch.collector._config import CollectorSettings

    async def both():
        made = [Collector(CollectorSettings(grpc_listen="127.0.0.1:0", http_listen="127.0.0.1:0"))
                for _ in range(2)]
        for c in made:
            await c.start()
        dirs = [c.trace_store.directory for c in made]
        modes = [stat.S_IMODE(os.stat(d).st_mode) for d in dirs]
        for c in made:
            await c.stop(grace_s=0)
        return dirs, modes

    dirs, modes = asyncio.run(both())
    assert dirs[0] != dirs[1] and modes == [0o700, 0o700], (dirs, modes)
    assert not any(os.path.exists(d) for d in dirs)


def test_an_upload_for_a_request_never_issued_or_over_a_stored_trace_is_refused(start_collector):
    """The agents' token is shared by every job: holding it is not enough to store a trace.
    Only a request this collector sent to that rank of that job is taken, once; a forged
    request id, another rank, another job, or a second upload over the stored trace are
    refused and counted, and the stored trace is served unchanged."""
    running = start_collector()
    data, forged = gz(500), gz(600)
    issue(running, "r1", "job", 0)
    with running.channel() as ch:
        stub = agent_pb2_grpc.AgentServiceStub(ch)
        assert stub.UploadTrace(iter([first(data, request_id="r1")]), timeout=10).bytes == len(data)
        for chunk, code in ((first(forged, request_id="never-issued"), grpc.StatusCode.PERMISSION_DENIED),
                            (first(forged, request_id="r1", rank=1), grpc.StatusCode.PERMISSION_DENIED),
                            (first(forged, request_id="r1", job="other"), grpc.StatusCode.PERMISSION_DENIED),
                            (first(forged, request_id="r1"), grpc.StatusCode.ALREADY_EXISTS)):
            with pytest.raises(grpc.RpcError) as err:
                stub.UploadTrace(iter([chunk]), timeout=10)
            assert err.value.code() == code, (chunk.request_id, chunk.job, chunk.rank, err.value.details())
    assert running.get("/api/traces/job.r1.rank0")[2] == data
    text = running.get("/metrics")[2].decode()
    assert 'reason="not_issued"} 3.0' in text and 'reason="exists"} 1.0' in text, \
        [line for line in text.splitlines() if "trace" in line and "reject" in line]


def test_parallel_downloads_of_a_large_trace_stream_from_disk(start_collector):
    """Four parallel GETs of a 48 MiB trace: each gets every byte, and the process's peak
    memory grows by far less than one copy of the trace (it was four, read whole on the loop)."""
    import concurrent.futures
    import hashlib
    import http.client
    import resource
    import zlib

    running = start_collector(trace_upload_max_bytes=64 << 20)
    block, blocks = bytes(1 << 20), 48
    digest = hashlib.sha256()

    def parts():
        comp = zlib.compressobj(0, zlib.DEFLATED, 31)  # gzip, stored blocks: as large as its data
        for _ in range(blocks):
            yield comp.compress(block)
        yield comp.flush()

    total = sum(map(len, parts()))  # (a dry run: the upload below is made on the fly as well)

    def chunks():
        for i, part in enumerate(parts()):
            digest.update(part)
            yield first(part, request_id="big", total=total) if i == 0 else agent_pb2.TraceChunk(data=part)

    issue(running, "big", "job", 0)
    with running.channel() as ch:
        stored = agent_pb2_grpc.AgentServiceStub(ch).UploadTrace(chunks(), timeout=60)
    assert stored.bytes > 48 << 20
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB

    def download(_):
        host, port = running.collector.http_address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request("GET", "/api/traces/job.big.rank0")
        resp = conn.getresponse()
        h, n = hashlib.sha256(), 0
        while part := resp.read(1 << 20):
            h.update(part)
            n += len(part)
        conn.close()
        return resp.status, n, h.hexdigest()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(download, range(4)))
    assert got == [(200, stored.bytes, digest.hexdigest())] * 4
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    # One trace read whole is 48 MiB; streamed, the four readers' and servers' buffers and the
    # threads' arenas grew the peak 14-26 MiB across runs (the spread is the thread timing).
    assert grew_mib < 40, grew_mib


def test_two_concurrent_uploads_of_one_request_never_share_a_file(start_collector):
    """While one stream uploads a request's trace, a second stream for the same request is
    refused "busy" (UNAVAILABLE) without touching the first one's file; the stored trace is
    byte for byte the first stream's."""
    import threading
    import time

    running = start_collector()
    store = running.collector.trace_store
    mine, other = gz(3000), gz(4000)
    half = len(mine) // 2
    go_on = threading.Event()

    def slow():
        yield first(mine[:half], request_id="r1", total=len(mine))
        go_on.wait(10)
        yield agent_pb2.TraceChunk(data=mine[half:])

    issue(running, "r1", "job", 0)
    with running.channel() as ch:
        stub = agent_pb2_grpc.AgentServiceStub(ch)
        pending = stub.UploadTrace.future(slow(), timeout=20)
        deadline = time.monotonic() + 10
        while not store._uploading and time.monotonic() < deadline:  # its first chunk is in
            time.sleep(0.01)
        assert store._uploading == {"job.r1.rank0"}
        with pytest.raises(grpc.RpcError) as err:
            stub.UploadTrace(iter([first(other, request_id="r1")]), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "being uploaded" in err.value.details()
        go_on.set()
        assert pending.result().bytes == len(mine)
    assert running.get("/api/traces/job.r1.rank0")[2] == mine
    assert not store._uploading and not [n for n in os.listdir(store.directory) if n.endswith(".part")]


def test_junk_trace_references_from_another_jobs_agent_evict_nothing(start_collector):
    """An agent of job "evil" (the agents' token is shared) reports 150 junk request ids and a
    reference to job "job"'s pending request over a real stream: the pending request keeps
    its place and gets no reference from it, and job's rank 0 then uploads its trace and has it
    stored."""
    from collector_testlib import batch, hello

    running = start_collector()
    issue(running, "pending", "job", 0)
    junk = [agent_pb2.TraceRef(request_id=f"junk{i}", path="/tmp/x") for i in range(150)]
    junk.append(agent_pb2.TraceRef(request_id="pending", path="/tmp/forged"))
    with running.channel() as ch:
        list(agent_pb2_grpc.AgentServiceStub(ch).Connect(iter([hello(job="evil"), batch(1, traces=junk)]),
                                                           timeout=10))
    book = running.collector.state.traces
    assert book.issued("pending", "job", 0) and book.refs("pending") == {}
    assert book.ignored >= 1 and len(book.snapshot()) <= 1 + 10
    data = gz(700)
    assert upload(running, [first(data, request_id="pending")]).bytes == len(data)
    assert running.get("/api/traces/job.pending.rank0")[2] == data


def test_a_download_never_read_is_cut_off_and_counted_in_the_metric(start_collector):
    """A real collector serving a 32 MiB trace to a client that asks and never reads: cut off
    at the write deadline (shortened here to 0.5 s), and stepwatch_collector_http_cut_off_total
    says so on /metrics."""
    import socket
    import time
    import zlib

    running = start_collector(trace_upload_max_bytes=64 << 20)
    comp = zlib.compressobj(0, zlib.DEFLATED, 31)  # stored blocks: as large as its data
    data = comp.compress(os.urandom(32 << 20)) + comp.flush()
    issue(running, "big", "job", 0)
    with running.channel() as ch:
        chunks = [first(data[:1 << 20], request_id="big", total=len(data))] + [
            agent_pb2.TraceChunk(data=data[i:i + (1 << 20)]) for i in range(1 << 20, len(data), 1 << 20)]
        assert agent_pb2_grpc.AgentServiceStub(ch).UploadTrace(iter(chunks), timeout=60).bytes == len(data)
    running.collector._http._write_timeout_s = 0.5
    metric = "stepwatch_collector_http_cut_off_total"
    assert f"{metric} 0.0" in running.get("/metrics")[2].decode()
    host, port = running.collector.http_address.rsplit(":", 1)
    stuck = socket.create_connection((host, int(port)), timeout=10)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(b"GET /api/traces/job.big.rank0 HTTP/1.1\r\nHost: x\r\n\r\n")
    deadline = time.monotonic() + 20
    while f"{metric} 1.0" not in running.get("/metrics")[2].decode():
        assert time.monotonic() < deadline, [l for l in running.get("/metrics")[2].decode().splitlines() if "cut_off" in l]
        time.sleep(0.1)
    stuck.close()
