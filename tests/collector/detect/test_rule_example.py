"""docs/ARCHITECTURE.md's worked example of a new rule, run as written: its rule file, its config
section and its line in RULES give an engine that raises the new alert from a rank's step
columns, keeps one episode while it holds, ends it when the rank is forgotten, says nothing on a
job that does not wait, and names a bad value of the section by its dotted key."""

from __future__ import annotations

import dataclasses
import os
import re

from stepwatch.collector.detect import RULES, DetectionConfig, DetectionEngine, Steps
from stepwatch.collector.detect import _engine
from stepwatch.core.settings import load_section, section

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "ARCHITECTURE.md")


def _blocks() -> list[str]:
    text = open(DOC).read()
    part = text[text.index("**A new rule**"):text.index("### The rules")]
    return re.findall(r"```python\n(.*?)```", part, re.S)


def _example():
    rule_file, config_line, rules_line = _blocks()
    ns: dict = {}
    exec(compile(rule_file, "collector/detect/_loader_rule.py", "exec"), ns)  # noqa: S102 - the doc's own code
    # the config section as the doc's one line declares it, on top of DetectionConfig
    name, _, decl = config_line.strip().partition(":")
    kind, _, made = decl.partition("=")
    assert kind.strip() == "LoaderWaitConfig" and made.strip().startswith("section(LoaderWaitConfig")
    cfg_cls = dataclasses.make_dataclass(
        "WithLoaderWait", [(name.strip(), ns["LoaderWaitConfig"], section(ns["LoaderWaitConfig"], "example"))],
        bases=(DetectionConfig,), frozen=True)
    # RULES as the doc's line writes it, resolved against the engine's own names
    rules = eval(rules_line.split("=", 1)[1], {**vars(_engine), **ns})  # noqa: S307 - the doc's own line
    assert tuple(rules[:-1]) == RULES, "the doc's RULES line lists the engine's rules and the new one"
    return ns, cfg_cls, rules


def _feed(engine: DetectionEngine, wait_share: float, seconds: float, t0: float = 1.7e9) -> None:
    s, t = 0, t0
    while t - t0 < seconds:
        steps, ends, durs, waits = [], [], [], []
        for _ in range(20):
            s += 1
            t += 0.05
            steps.append(s), ends.append(t), durs.append(0.05), waits.append(0.05 * wait_share)
        engine.feed("j", 0, Steps(steps, ends, durs, waits))


def test_the_worked_example_raises_its_alert_and_nothing_on_a_job_that_does_not_wait():
    ns, cfg_cls, rules = _example()
    cfg = load_section(cfg_cls, {"loader_wait": {"share": 0.4}}, "test", "detection.")
    assert cfg.loader_wait.share == 0.4
    starved = DetectionEngine(cfg, rules=rules)
    _feed(starved, 0.6, 30.0)
    (cond,) = [c for c in starved.conditions() if c.alertname == ns["LOADER_STARVED"]]
    assert cond.rank == 0 and "60%" in cond.summary and cond.step == 101  # the first judged step after warm-up
    since = cond.since
    _feed(starved, 0.6, 5.0, t0=1.7e9 + 30.05)
    assert starved.condition(cond.key).since == since  # one episode while it holds
    starved.forget("j", 0)
    assert not starved.conditions()

    quiet = DetectionEngine(cfg, rules=rules)
    _feed(quiet, 0.1, 30.0)
    assert not quiet.conditions()


def test_the_example_config_section_rejects_a_bad_value_by_its_dotted_name():
    _, cfg_cls, _ = _example()
    try:
        load_section(cfg_cls, {"loader_wait": {"share": 2}}, "test", "detection.")
    except Exception as exc:  # SettingsError
        assert "detection.loader_wait.share" in str(exc), exc
    else:
        raise AssertionError("a share of 2 was accepted")
