"""``/api/life``: a job's step time over its life as one summary series made on the collector
(the ranks' median, lowest and highest per bin), a rank's own on request, through a real
collector over real gRPC and HTTP; and its size at hundreds of ranks through the real ingest."""

from __future__ import annotations

import json

from collector_testlib import Stream, batch, hello
from stepwatch.collector.api._life_route import LIFE_BINS, life_document
from stepwatch.collector.ingest._pipeline import Pipeline
from stepwatch.collector.state._state import CollectorState
from stepwatch.proto.stepwatch.v1 import agent_pb2

T0 = 1_700_000_000.0


def _steps(first: int, t: float, count: int, duration: float) -> list:
    return [agent_pb2.StepRecord(step=first + i, end_time_s=t + (i + 1) * duration, duration_s=duration,
                                 dataloader_wait_s=0.001, clock=agent_pb2.STEP_CLOCK_CUDA_EVENT)
            for i in range(count)]


def _job(collector, job: str, seconds: float, durations: dict) -> None:
    """Each rank of ``durations`` sends ``seconds`` of steps of its duration (its own end times)."""
    with collector.channel() as chan:
        for rank, d in durations.items():
            s = Stream(chan, hello(job=job, rank=rank, session=f"s{rank}"))
            n, t, seq = 1, T0, 0
            while t - T0 < seconds:
                rows = _steps(n, t, 500, d)
                n, t, seq = n + 500, rows[-1].end_time_s, seq + 1
                s.send(batch(seq, steps=rows))
            s.close()


def test_life_is_the_ranks_median_with_their_range_and_one_rank_on_request(collector):
    _job(collector, "two", 600, {0: 0.040, 1: 0.060, 2: 0.050})
    status, ctype, body = collector.get("/api/life?job=two&since_s=all")
    doc = json.loads(body)
    assert status == 200 and ctype == "application/json"
    assert doc["ranks"] == 3 and doc["since_s"] is None and doc["rank"] is None and doc["whole"]
    assert 50 <= len(doc["points"]) <= 60, len(doc["points"])  # 600 s in bins of 10 s
    for end, mid, lo, hi in doc["points"]:
        assert abs(mid - 0.050) < 1e-9 and abs(lo - 0.040) < 1e-9 and abs(hi - 0.060) < 1e-9
        assert doc["first_s"] <= end <= doc["last_s"]
    one = json.loads(collector.get("/api/life?job=two&since_s=all&rank=1")[2])
    assert one["ranks"] == 1 and one["rank"] == 1
    assert {round(p[1], 9) for p in one["points"]} == {0.06}
    # the last minute only: the range ends at the job's last span and holds a minute of bins
    last = json.loads(collector.get("/api/life?job=two&since_s=60")[2])
    assert abs(last["first_s"] - (last["last_s"] - 60)) < 1e-6 and not last["whole"]
    assert 4 <= len(last["points"]) <= 7 and all(p[0] >= last["first_s"] for p in last["points"])
    # the default is the last hour: a 10-minute job is shown whole
    assert json.loads(collector.get("/api/life?job=two")[2])["first_s"] == doc["first_s"]
    none = json.loads(collector.get("/api/life?job=nope")[2])
    assert none["ranks"] == 0 and none["points"] == []


def test_bad_queries_name_what_was_wrong(collector):
    assert collector.get("/api/life")[0] == 400
    for query, word in (("since_s=-5", "since_s="), ("since_s=nan", "since_s="), ("since_s=1e30", "since_s="),
                        ("since_s=abc", "since_s="), ("rank=-1", "rank="), ("rank=x", "rank=")):
        status, _, body = collector.get(f"/api/life?job=j&{query}")
        assert status == 400 and body.decode().startswith(word), (query, body)
    assert "/api/life" in json.loads(collector.get("/api")[2])["routes"]


def test_an_answer_is_bounded_whatever_the_ranks_and_the_life():
    """300 ranks of 40 minutes each, through the real ingest: the answer holds at most LIFE_BINS
    points (about 60 bytes each) whatever the ranks; the page's cost does not grow with them."""
    state = CollectorState(60.0)
    pipe = Pipeline(state, [])
    for rank in range(300):
        h = hello(job="big", rank=rank, session=f"s{rank}").hello
        key = pipe.connect(h, T0)
        d = 1.0 + rank / 1000
        pipe.batch(key, h, agent_pb2.Batch(seq=1, steps=_steps(1, T0, 2400, d)), T0 + 2400 * d)
    whole = life_document(state, "big", None)
    assert whole["ranks"] == 300 and len(whole["points"]) <= LIFE_BINS
    assert len(json.dumps(whole)) < 240 * 100
    assert abs(whole["points"][0][1] - 1.15) < 0.01  # the median rank's (150's) mean step
    assert abs(whole["points"][0][2] - 1.0) < 1e-9 and abs(whole["points"][0][3] - 1.299) < 1e-9
    hour = life_document(state, "big", 600.0)
    assert hour["last_s"] - hour["first_s"] == 600.0 and len(hour["points"]) <= 60
