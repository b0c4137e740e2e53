"""The one settings model: parsers, precedence, sections, one error format, describe."""

from __future__ import annotations

import dataclasses
from typing import Optional

import pytest
from hypothesis import given, strategies as st

from stepwatch.core.settings import (SettingsError, describe, load, option,
                                      parse_bool, parse_duration, parse_int, parse_size, positive,
                                      section, to_mapping)


@dataclasses.dataclass(frozen=True)
class Inner:
    ratio: float = option(0.5, "a ratio", check=positive())
    steps: int = option(10, "steps")

    def __post_init__(self):
        if self.steps > 100:
            raise ValueError("inner.steps: must be <= 100")


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str = option("x", "a name", env="T_NAME")
    every: Optional[int] = option(None, "optional count", env="T_EVERY", check=positive())
    wait_s: float = option(1.0, "a duration", env="T_WAIT", parse=parse_duration)
    secret: str = option("", "a secret", env="T_SECRET", secret=True)
    inner: Inner = section(Inner, "nested", env="T_INNER")


def test_precedence_argument_environment_file_default():
    env = {"T_NAME": "env", "T_WAIT": "2m"}
    got = load(Outer, {"name": "arg", "every": None}, env, {"name": "file", "every": 3})
    assert (got.name, got.every, got.wait_s, got.inner) == ("arg", 3, 120.0, Inner())


def test_section_from_file_mapping_or_environment_text():
    assert load(Outer, {}, {}, {"inner": {"steps": 5}}).inner == Inner(steps=5)
    got = load(Outer, {}, {"T_INNER": "{ratio: 0.25}"}, {"inner": {"steps": 5}})
    assert got.inner == Inner(ratio=0.25)  # a section comes whole from the first source


@pytest.mark.parametrize("kwargs, message", [
    (dict(args={"every": 0}), "option 'every' from argument: invalid value 0: must be > 0"),
    (dict(environ={"T_WAIT": "soon"}), "option 'wait_s' from environment T_WAIT: invalid value 'soon'"),
    (dict(file_values={"inner": {"ratio": "x"}}, file_name="config file c.yml"),
     "option 'inner.ratio' from config file c.yml: invalid value 'x': expected a number"),
    (dict(file_values={"inner": {"steps": 500}}), "inner.steps: must be <= 100"),
    (dict(file_values={"inner": {"stepz": 1}}), "unknown option(s) inner.stepz"),
    (dict(args={"nam": "y"}), "unknown option(s) in argument: nam; known: every, inner, name"),
    (dict(environ={"T_SECRET": "x"}, args={"every": "secret!"}), "invalid value 'secret!'"),
    (dict(environ={"T_INNER": "[1, 2]"}), "expected a mapping, got list"),
])
def test_every_error_names_option_source_and_value(kwargs, message):
    kwargs.setdefault("environ", {})
    with pytest.raises(SettingsError) as err:
        load(Outer, **kwargs)
    assert message in str(err.value)


def test_secret_values_are_not_echoed():
    from stepwatch.collector._config import CollectorSettings

    with pytest.raises(SettingsError) as err:
        load(CollectorSettings, {"auth_token": "hunter 2"}, {})
    assert "invalid value '***'" in str(err.value) and "hunter" not in str(err.value)
    assert "secret" not in to_mapping(load(Outer, {"secret": "s3"}, {}), public=True)
    assert to_mapping(load(Outer, {"secret": "s3"}, {}))["secret"] == "s3"


def test_parsers():
    assert [parse_bool(v) for v in ("1", "yes", "On", "0", "off", "", True)] == \
        [True, True, True, False, False, False, True]
    assert parse_int("0xE8") == 232 and parse_int(5.0) == 5
    for bad in ("1.5", True, "ten", 2.5):
        with pytest.raises(ValueError):
            parse_int(bad)
    assert [parse_duration(v) for v in ("250ms", "30s", "5m", "1h", "1d", 2, "1.5")] == \
        [0.25, 30.0, 300.0, 3600.0, 86400.0, 2.0, 1.5]
    assert [parse_size(v) for v in ("64MiB", "2GiB", "1K", "512", 1024, "1.5KiB")] == \
        [64 << 20, 2 << 30, 1024, 512, 1024, 1536]
    for bad in ("5 parsecs", "--1s", "nan"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert parse_duration("-1s") == -1.0  # a number: each option's check says what it must be


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False), st.sampled_from(["ms", "s", "m", "h"]))
def test_duration_text_round_trips(value, unit):
    scale = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
    assert parse_duration(f"{value!r}{unit}") == pytest.approx(value * scale)


def test_describe_walks_sections_once_per_option():
    rows = list(describe(Outer))
    assert [r[0] for r in rows] == ["name", "every", "wait_s", "secret", "inner.ratio", "inner.steps"]
    assert rows[0] == ("name", "T_NAME", "x", "a name")


def test_undeclared_field_is_a_programming_error():
    @dataclasses.dataclass(frozen=True)
    class Bad:
        plain: int = 3

    with pytest.raises(TypeError, match="Bad.plain is not declared"):
        load(Bad, {}, {})


def test_errors_state_the_real_rule_and_cut_long_values():
    """A negative duration is refused by its rule ("> 0"), not as text that is no duration; a
    5,000-character value is shown cut, with its length."""
    from stepwatch.agent._options import AgentSettings
    with pytest.raises(SettingsError) as bad:
        load(AgentSettings, {}, environ={"STEPWATCH_FLUSH_INTERVAL_S": "-1"})
    assert str(bad.value) == ("option 'flush_interval_s' from environment STEPWATCH_FLUSH_INTERVAL_S: "
                              "invalid value '-1': must be > 0")
    with pytest.raises(SettingsError) as long:
        load(AgentSettings, {}, environ={"STEPWATCH_JOB": "x" * 5000})
    assert len(str(long.value)) < 300 and "(5000 characters)" in str(long.value)


def test_stepwatch_run_names_the_flag_it_was_given(capsys):
    from stepwatch.collector.tools import main
    assert main(["run", "--collector", "not-an-address", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepwatch run: error: --collector: invalid value 'not-an-address'"), err
    assert "STEPWATCH_COLLECTOR" not in err
