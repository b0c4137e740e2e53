"""AlertBook lifecycle on an injected clock: pending -> firing -> resolved, de-duplication by
(alertname, job, rank), severity changes, retention; and the stepwatch_alert_active metric."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st
from prometheus_client import CollectorRegistry

from stepwatch.collector.alerting import AlertBook, AlertMetrics
from stepwatch.collector.detect import Condition

T0 = 1_700_000_000.0


def cond(severity="warning", for_s=60.0, rank=0, name="StepwatchThroughputDrift", step=5):
    return Condition(name, "j", rank, severity, f"{severity} summary", T0 - 30, step, for_s)


def test_pending_then_firing_after_for_then_resolved():
    book = AlertBook()
    assert book.update(T0, [cond()]) == []
    (a,) = book.snapshot()
    assert a.state == "pending" and a.starts_at == T0 - 30
    assert book.update(T0 + 59, [cond()]) == []
    (fired,) = book.update(T0 + 60, [cond()])
    assert (fired.state, fired.fired_at, fired.step) == ("firing", T0 + 60, 5)
    assert fired.labels() == {"alertname": "StepwatchThroughputDrift",
                              "training_job": "j", "rank": "0", "source": "collector"}
    (resolved,) = book.update(T0 + 100, [])
    assert (resolved.state, resolved.ends_at) == ("resolved", T0 + 100)
    assert [a.state for a in book.snapshot()] == ["resolved"]


def test_same_condition_again_is_one_alert():
    book = AlertBook()
    out = [book.update(T0 + i, [cond(for_s=0), cond(for_s=0)]) for i in range(5)]
    assert [len(o) for o in out] == [1, 0, 0, 0, 0]
    assert len(book.snapshot()) == 1 and len(book.firing()) == 1


def test_pending_alert_that_ends_early_is_dropped_silently():
    book = AlertBook()
    book.update(T0, [cond()])
    assert book.update(T0 + 30, []) == []
    assert book.snapshot() == []


def test_severity_change_updates_the_episode_in_place():
    book = AlertBook()
    (first,) = book.update(T0, [cond(for_s=0)])
    (up,) = book.update(T0 + 10, [cond("critical", for_s=0)])
    assert (up.severity, up.state, up.starts_at, up.fired_at) == ("critical", "firing", T0 - 30, T0)
    assert up.labels() == first.labels()  # one alert in Alertmanager across the change
    assert [sev for _, sev in up.history] == ["warning", "critical"]
    (down,) = book.update(T0 + 20, [cond("warning", for_s=0)])
    assert [sev for _, sev in down.history] == ["warning", "critical", "warning"]
    assert len(book.snapshot()) == 1 and book.firing()[0].severity == "warning"


def test_resolve_waits_for_the_hold_and_a_return_continues_the_episode():
    book = AlertBook(hold_s=60, steps=lambda job, rank: 4242)
    book.update(T0, [cond(for_s=0)])
    assert book.update(T0 + 10, []) == []  # absent, within the hold
    assert book.update(T0 + 50, [cond(for_s=0)]) == []  # back: same episode, nothing new
    assert book.update(T0 + 60, []) == []
    (resolved,) = book.update(T0 + 120, [])
    assert (resolved.state, resolved.ends_at, resolved.fired_at) == ("resolved", T0 + 120, T0)
    assert (resolved.raised_step, resolved.resolved_step) == (4242, 4242)


def test_resolved_alerts_are_kept_for_the_retention_only():
    book = AlertBook(retention_s=100)
    book.update(T0, [cond(for_s=0)])
    book.update(T0 + 1, [])
    book.update(T0 + 101, [])
    assert len(book.snapshot()) == 1
    book.update(T0 + 102, [])
    assert book.snapshot() == []


def test_metric_lists_firing_alerts_only():
    book, reg = AlertBook(), CollectorRegistry()
    AlertMetrics(book, reg)
    book.update(T0, [cond(for_s=0, rank=1), cond(for_s=600, name="StepwatchOOM")])
    assert reg.get_sample_value("stepwatch_alert_active", {"alertname": "StepwatchThroughputDrift",
                                "severity": "warning", "training_job": "j", "rank": "1"}) == 1.0
    assert reg.get_sample_value("stepwatch_alert_active", {"alertname": "StepwatchOOM", "severity": "warning",
                                "training_job": "j", "rank": "0"}) is None


@settings(max_examples=50, deadline=None)
@given(held=st.lists(st.booleans(), min_size=1, max_size=40), for_s=st.sampled_from([0.0, 5.0, 20.0]))
def test_any_sequence_alternates_fire_and_resolve_and_respects_for(held, for_s):
    """One tick per second; the condition holds or not. Outputs alternate firing/resolved, and
    a firing comes only after the condition has held for for_s without a gap."""
    book, run_start, last = AlertBook(), None, "resolved"
    for i, on in enumerate(held):
        now = T0 + i
        run_start = (run_start if run_start is not None else now) if on else None
        for a in book.update(now, [cond(for_s=for_s)] if on else []):
            assert a.state != last, (a.state, i)
            last = a.state
            if a.state == "firing":
                assert on and now - run_start >= for_s
            else:
                assert not on
    assert len(book.snapshot()) <= 1 + held.count(False)


_conditions = st.lists(  # per update: {(name, rank): severity or absent}
    st.dictionaries(st.tuples(st.sampled_from(["StepwatchThroughputDrift", "StepwatchStragglerRank"]),
                              st.integers(0, 3)),
                    st.sampled_from(["info", "warning", "critical"]), max_size=6),
    min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(_conditions, st.sampled_from([0.0, 10.0, 25.0]), st.sampled_from([0.0, 15.0, 40.0]))
def test_updating_only_the_touched_keys_gives_what_a_full_update_gives(seq, hold_s, for_s):
    """update_keys (the batch path: only the conditions that came, changed or went) and
    update (every condition) give the same changes, in the same states, at every step."""
    full, part = AlertBook(hold_s=hold_s), AlertBook(hold_s=hold_s)
    active: dict = {}
    for i, held in enumerate(seq):
        now = T0 + 7.0 * i
        now_conds = {(name, "j", rank): Condition(name, "j", rank, sev, f"{sev} summary", T0, 5, for_s)
                     for (name, rank), sev in held.items()}
        touched = {k for k in now_conds.keys() | active.keys() if now_conds.get(k) != active.get(k)}
        active = now_conds
        a = full.update(now, list(now_conds.values()))
        b = part.update_keys(now, touched, now_conds.get)
        key = lambda x: (x.key, x.state)  # noqa: E731 - the order within one update is free
        assert sorted(map(repr, sorted(a, key=key))) == sorted(map(repr, sorted(b, key=key)))
        assert sorted(map(repr, full.snapshot())) == sorted(map(repr, part.snapshot()))


def test_a_condition_back_within_the_hold_with_another_onset_is_a_new_change_of_the_episode():
    from stepwatch.collector.alerting import AlertBook
    from stepwatch.collector.detect._types import Condition
    book = AlertBook(3600.0, hold_s=600.0)
    first = Condition("StepwatchThroughputDrift", "j", 0, "info", "+3% since step 300", 1000.0, 300)
    book.update(1010.0, [first])
    book.annotate(first.key, diagnosis="host CPU +1.0 ms/step", diagnosis_complete=True)
    book.update(1020.0, [])  # cleared: the hold begins
    again = Condition("StepwatchThroughputDrift", "j", 0, "critical", "+25% since step 403", 1030.0, 403)
    (changed,) = book.update(1035.0, [again])
    assert changed.further and changed.step == 403 and changed.diagnosis == "" and not changed.diagnosis_complete
    (before,) = changed.earlier
    assert before["step"] == 300 and before["diagnosis"] == "host CPU +1.0 ms/step", before
    assert book.update(1040.0, [again]) == []  # the same onset again: nothing new


def test_a_resolved_drift_episode_keeps_what_it_was_raised_on_and_its_peak():
    """A healthy H200 job's hump was paged critical at +9.3% and resolved reading "+1.9%" (the
    summary follows the sustained level, which by then was back): the episode keeps the summary
    it fired with and the largest ratio it reached, in /api/alerts and for Alertmanager."""
    from stepwatch.collector.alerting._alertmanager import payload

    def drift(ratio):
        return Condition("StepwatchThroughputDrift", "j", 0, "critical", f"step time +{100 * (ratio - 1):.1f}%",
                         T0 - 30, 5, 0.0, ratio)

    book = AlertBook()
    (fired,) = book.update(T0, [drift(1.093)])
    assert fired.to_json()["raised_summary"] == "step time +9.3%" and fired.to_json()["peak_ratio"] == 1.093
    assert book.update(T0 + 10, [drift(1.121)]) == []  # the ratio follows the level (not a new event)
    book.update(T0 + 20, [drift(1.019)])
    (resolved,) = book.update(T0 + 30, [])
    got = resolved.to_json()
    assert (got["state"], got["summary"], got["ratio"]) == ("resolved", "step time +1.9%", 1.019), got
    assert (got["raised_summary"], got["peak_ratio"]) == ("step time +9.3%", 1.121), got
    (item,) = payload([resolved], T0 + 30, 60.0)
    assert item["annotations"]["raised"] == "step time +9.3%" and item["annotations"]["peak_ratio"] == "1.1210"
