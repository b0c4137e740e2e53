"""Rendezvous placement of jobs on collector replicas (stepwatch.core.placement)."""

from __future__ import annotations

import socket

import pytest

from stepwatch.core.placement import Placement, parse_collectors

JOBS = [f"job-{i}" for i in range(600)]


def ONE(host, port):
    """Every name has one address: each entry is one replica under its own name."""
    return ["10.9.9.9"]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def owners(p: Placement) -> dict:
    return {job: p.choose(job) for job in JOBS}


def test_every_replica_gets_a_fair_share_and_every_rank_agrees():
    targets = "c0:7470,c1:7470,c2:7470"
    a, b = owners(Placement(targets, resolve=ONE)), owners(Placement(targets, resolve=ONE))
    assert a == b  # two ranks of a job, no coordination
    counts = {c: sum(1 for o in a.values() if o == c) for c in ("c0:7470", "c1:7470", "c2:7470")}
    assert all(150 <= n <= 250 for n in counts.values()), counts  # 200 each expected


def test_a_replica_added_takes_only_its_share_and_a_replica_removed_moves_only_its_jobs():
    three = owners(Placement("c0:1,c1:1,c2:1", resolve=ONE))
    four = owners(Placement("c0:1,c1:1,c2:1,c3:1", resolve=ONE))
    moved = [j for j in JOBS if three[j] != four[j]]
    assert all(four[j] == "c3:1" for j in moved), "a job moved between two old replicas"
    assert 100 <= len(moved) <= 200, len(moved)  # about a quarter
    two = owners(Placement("c0:1,c2:1", resolve=ONE))
    assert all(two[j] == three[j] for j in JOBS if three[j] != "c1:1"), "a job of a kept replica moved"


def test_a_failed_replica_is_passed_over_for_down_s_then_tried_again():
    clock = Clock()
    p = Placement("c0:1,c1:1,c2:1", down_s=30.0, resolve=ONE, clock=clock)
    job = "llama"
    first, second = p.ranked(job)[:2]
    assert p.choose(job) == first
    p.failed(first)
    assert p.choose(job) == second  # every rank of the job computes the same second choice
    clock.t = 29.0
    assert p.choose(job) == second
    clock.t = 30.0
    assert p.choose(job) == first  # back to its own replica once it answers again
    p.failed(first)
    p.reached(first)
    assert p.choose(job) == first
    for c in p.candidates():
        p.failed(c)
    assert p.choose(job) == first  # all down: keep trying the job's own


def test_a_name_with_several_addresses_is_several_replicas_resolved_again_every_refresh():
    clock = Clock()
    answers = {"stepwatch-collector": ["10.0.0.1", "10.0.0.2"]}
    p = Placement("stepwatch-collector:7470", refresh_s=30.0, resolve=lambda host, port: answers[host],
                  clock=clock)
    assert p.candidates() == ["10.0.0.1:7470", "10.0.0.2:7470"] and not p.single
    before = owners(p)
    answers["stepwatch-collector"] = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]  # a third pod became ready
    assert owners(p) == before  # not before the refresh
    clock.t = 30.0
    after = owners(p)
    assert {after[j] for j in JOBS if after[j] != before[j]} == {"10.0.0.3:7470"}
    answers["stepwatch-collector"] = ["10.0.0.1"]
    clock.t = 60.0
    assert p.candidates() == ["stepwatch-collector:7470"] and p.single  # one address: the name itself


def test_an_unresolvable_name_keeps_what_it_resolved_to_before():
    clock = Clock()
    calls = []

    def resolve(host, port):
        calls.append(host)
        if len(calls) > 1:
            raise socket.gaierror("temporary failure in name resolution")
        return ["10.0.0.1", "10.0.0.2"]

    p = Placement("svc:1", refresh_s=1.0, resolve=resolve, clock=clock)
    assert p.candidates() == ["10.0.0.1:1", "10.0.0.2:1"]
    clock.t = 5.0
    assert p.candidates() == ["10.0.0.1:1", "10.0.0.2:1"] and len(calls) == 2


def test_localhost_is_one_collector_and_the_target_is_passed_on_unchanged():
    p = Placement("localhost:7470")
    assert p.single and p.choose("any") == "localhost:7470"
    assert Placement("127.0.0.1:1").choose("x") == "127.0.0.1:1"


@pytest.mark.parametrize("raw, message", [
    ("", "an entry is empty"), ("a:1,,b:2", "an entry is empty"), ("a:1,b", "'b': expected HOST:PORT"),
    ("a:99999", "'a:99999': expected HOST:PORT"),
])
def test_bad_collector_lists_name_the_entry(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_collectors(raw)


def test_the_agent_setting_takes_a_list():
    from stepwatch.core.settings import SettingsError, load
    from stepwatch.agent._options import AgentSettings

    s = load(AgentSettings, {}, {"STEPWATCH_COLLECTOR": " c0:7470, c1:7470 "}, {}, "config file")
    assert s.collector == "c0:7470,c1:7470"
    with pytest.raises(SettingsError, match="collector"):
        load(AgentSettings, {}, {"STEPWATCH_COLLECTOR": "c0:7470,c1"}, {}, "config file")
