"""One settings model for every part of stepwatch: agent, sidecar, collector, detectors.

Settings are frozen dataclasses whose fields are declared with :func:`option` (a scalar with
help text, optional environment variable, parser and validator) or :func:`section` (a nested
settings dataclass). :func:`load` resolves one such class by the single precedence rule

    argument > environment > config file > default

(a source counts as given when its value ``is not None``). Every value goes through the same
parsers (:func:`parse_bool`, :func:`parse_int`, :func:`parse_float`, :func:`parse_duration`,
:func:`parse_size`, :func:`parse_hostport`), and every failure is a :class:`SettingsError`
in one format that names the option (dotted for nested sections), its source and the value:

    option 'drift.block_steps' from config file c.yml: invalid value 'x': expected an integer

Each default is written once, as the field's default. Pure functions: no I/O except
:func:`read_yaml_file`; importing this module imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from typing import Any, Callable, Iterator, Mapping, Optional

__all__ = ["SettingsError", "option", "section", "load", "load_section", "describe", "fields_of",
           "read_yaml_file", "to_mapping", "parse_bool", "parse_int", "parse_float",
           "parse_duration", "parse_size", "parse_hostport", "parse_log_level", "non_negative",
           "positive", "at_least", "between"]

_META = "stepwatch.settings"


class SettingsError(ValueError):
    """A bad setting: the message names the option, its source and the value."""


# -- parsers: text or a YAML scalar -> value; ValueError with a short reason ------------------
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    lowered = str(raw).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def parse_int(raw: Any) -> int:
    """Integers, also as text in any base Python accepts ("0xE8"); no bools, no fractions."""
    if isinstance(raw, bool):
        raise ValueError("expected an integer")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if raw.is_integer():
            return int(raw)
        raise ValueError("expected an integer")
    try:
        return int(str(raw).strip(), 0)
    except ValueError:
        raise ValueError("expected an integer") from None


def parse_float(raw: Any) -> float:
    """A finite number."""
    if isinstance(raw, bool):
        raise ValueError("expected a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


# (a sign is read, so "-1" is a value the option's check refuses with its rule, "> 0", rather
# than text that is no duration)
_DURATION = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(raw: Any) -> float:
    """Seconds: a number, or text with a unit ("250ms", "30s", "5m", "1h", "1d")."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return parse_float(raw)
    match = _DURATION.match(str(raw))
    if not match:
        raise ValueError("expected seconds, or a number with unit ms, s, m, h or d")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)


def parse_size(raw: Any) -> int:
    """Bytes: an integer, or text with a unit (1024-based "KiB".."TiB"; "K", "M", "G" alike)."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return parse_int(raw)
    match = _SIZE.match(str(raw))
    if not match:
        raise ValueError("expected bytes, or a number with unit KiB, MiB, GiB or TiB")
    unit = (match.group(2) or "B").upper()[0]
    scale = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
    return int(float(match.group(1)) * scale)


def parse_hostport(raw: Any) -> str:
    """``host:port`` (``[v6]:port`` too) with a port in 0..65535."""
    value = str(raw).strip()
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT with a port in 0..65535")
    return value


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_log_level(raw: Any) -> str:
    level = str(raw).strip().upper()
    if level not in _LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}")
    return level


# -- validators: (predicate, text for the error) ----------------------------------------------
def non_negative() -> tuple:
    return (lambda v: v >= 0, ">= 0")


def positive() -> tuple:
    return (lambda v: v > 0, "> 0")


def at_least(limit: float) -> tuple:
    return (lambda v: v >= limit, f">= {limit}")


def between(lo: float, hi: float) -> tuple:
    return (lambda v: lo <= v <= hi, f"in {lo}..{hi}")


@dataclasses.dataclass(frozen=True)
class _Spec:
    help: str
    env: Optional[str]
    parse: Optional[Callable[[Any], Any]]
    check: Optional[tuple]
    secret: bool
    section: bool


def option(default: Any, help: str, *, env: Optional[str] = None,
           parse: Optional[Callable[[Any], Any]] = None, check: Optional[tuple] = None,
           secret: bool = False) -> Any:
    """A scalar setting. ``parse`` defaults to the parser of the field's annotation
    (bool, int, float, str; ``Optional[...]`` also takes None/""); ``check`` is a
    ``(predicate, "constraint text")`` pair from the validators above; ``secret`` hides the
    value from :func:`describe` and :func:`to_mapping` (public=True)."""
    return dataclasses.field(default=default, metadata={
        _META: _Spec(help, env, parse, check, secret, section=False)})


def section(cls: type, help: str, *, env: Optional[str] = None) -> Any:
    """A nested settings dataclass. Given whole by an argument or ``env`` (a mapping, or
    YAML/JSON text), or as a mapping under its name in a config file; keys left out default."""
    return dataclasses.field(default=cls(), metadata={
        _META: _Spec(help, env, None, None, False, section=True)})


def fields_of(cls: type) -> Iterator[tuple[dataclasses.Field, _Spec]]:
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_META)
        if spec is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with option() or section()")
        yield f, spec


_PARSERS = {"bool": parse_bool, "int": parse_int, "float": parse_float, "str": str}


def _parser(cls: type, f: dataclasses.Field, spec: _Spec) -> tuple[Callable[[Any], Any], bool]:
    """(parser, optional) for a field: the declared one, else by annotation."""
    hint = typing.get_type_hints(cls)[f.name]
    optional = type(None) in typing.get_args(hint)
    if spec.parse is not None:
        return spec.parse, optional
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if optional else hint
    return _PARSERS[base.__name__], optional


def _convert(cls: type, f: dataclasses.Field, spec: _Spec, raw: Any, where: str) -> Any:
    parse, optional = _parser(cls, f, spec)
    if optional and (raw is None or (isinstance(raw, str) and not raw.strip())):
        return None
    try:
        value = parse(raw)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"option {where}: invalid value {_show(raw, spec)}: {exc}") from None
    if spec.check is not None and value is not None and not spec.check[0](value):
        raise SettingsError(f"option {where}: invalid value {_show(raw, spec)}: "
                            f"must be {spec.check[1]}")
    return value


_SHOW_MAX = 80  # characters of a bad value shown in an error (a 5,000-character job name)


def _show(raw: Any, spec: _Spec) -> str:
    if spec.secret:
        return "'***'"
    text = repr(raw)
    return text if len(text) <= _SHOW_MAX else f"{text[:_SHOW_MAX - 3]}... ({len(str(raw))} characters)"


def _yaml_mapping(raw: Any, what: str) -> Mapping[str, Any]:
    if isinstance(raw, str):
        import yaml  # only when a section arrives as text

        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise SettingsError(f"{what}: not valid YAML: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{what}: expected a mapping, got {type(raw).__name__}")
    return raw


def load_section(cls: type, values: Mapping[str, Any], source: str, prefix: str = "") -> Any:
    """An instance of ``cls`` from one mapping (nested sections as mappings); keys not given
    default. Unknown keys and bad values raise :class:`SettingsError` naming them."""
    what = f"{prefix.rstrip('.') or cls.__name__} from {source}"
    values = _yaml_mapping(values, what)
    known = {f.name: (f, spec) for f, spec in fields_of(cls)}
    unknown = sorted(str(k) for k in values if k not in known)
    if unknown:
        raise SettingsError(f"unknown option(s) {', '.join(prefix + k for k in unknown)} in "
                            f"{source}; known: {', '.join(prefix + k for k in known)}")
    kwargs = {}
    for name, raw in values.items():
        f, spec = known[name]
        if spec.section:
            kwargs[name] = load_section(type(f.default), raw, source, f"{prefix}{name}.")
        elif raw is not None:
            kwargs[name] = _convert(cls, f, spec, raw, f"'{prefix}{name}' from {source}")
    return _build(cls, kwargs, what)


def _build(cls: type, kwargs: dict, what: str) -> Any:
    try:
        return cls(**kwargs)
    except ValueError as exc:  # cross-field checks in __post_init__
        raise SettingsError(f"{what}: {exc}") from None


def load(cls: type, args: Optional[Mapping[str, Any]] = None,
         environ: Optional[Mapping[str, str]] = None,
         file_values: Optional[Mapping[str, Any]] = None,
         file_name: str = "config file") -> Any:
    """Resolve every field of ``cls``: argument > environment (``os.environ`` when None) >
    ``file_values`` (named ``file_name`` in errors) > default. A section comes whole from the
    first source that gives it. Unknown names in ``args`` or ``file_values`` are errors."""
    args = {k: v for k, v in (args or {}).items() if v is not None}
    file_values = dict(file_values or {})
    environ = os.environ if environ is None else environ
    known = {f.name: (f, spec) for f, spec in fields_of(cls)}
    for where, given in (("argument", args), (file_name, file_values)):
        unknown = sorted(str(k) for k in given if k not in known)
        if unknown:
            raise SettingsError(f"unknown option(s) in {where}: {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(known))}")
    kwargs = {}
    for name, (f, spec) in known.items():
        sources = ((args.get(name), "argument"),
                   (environ.get(spec.env) if spec.env else None, f"environment {spec.env}"),
                   (file_values.get(name), file_name))
        for raw, source in sources:
            if raw is None:
                continue
            if spec.section:
                kwargs[name] = raw if isinstance(raw, type(f.default)) else \
                    load_section(type(f.default), raw, source, f"{name}.")
            else:
                kwargs[name] = _convert(cls, f, spec, raw, f"'{name}' from {source}")
            break
    return _build(cls, kwargs, cls.__name__)


def read_yaml_file(path: str) -> dict[str, Any]:
    """A YAML file holding a mapping (empty file: empty mapping); SettingsError naming the
    file when it cannot be read, is not YAML, or is not a mapping."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise SettingsError(f"config file {path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"config file {path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: expected a mapping of option names, "
                            f"got {type(data).__name__}")
    return data


def to_mapping(settings: Any, public: bool = False) -> dict[str, Any]:
    """``{name: value}`` (sections nested), e.g. to hand settings to another process;
    ``public`` leaves secrets out."""
    out = {}
    for f, spec in fields_of(type(settings)):
        value = getattr(settings, f.name)
        if spec.section:
            out[f.name] = to_mapping(value, public)
        elif not (public and spec.secret):
            out[f.name] = value
    return out


def describe(cls: type, prefix: str = "", hex_names: tuple = ()) -> Iterator[tuple[str, str, Any, str]]:
    """``(dotted name, env or "", default, help)`` for every option of ``cls``, sections
    walked; for --help texts and documentation. Secrets show their default as ''."""
    for f, spec in fields_of(cls):
        if spec.section:
            yield from describe(type(f.default), f"{prefix}{f.name}.", hex_names)
        else:
            default = hex(f.default) if f.name in hex_names else f.default
            yield f"{prefix}{f.name}", spec.env or "", default, spec.help
