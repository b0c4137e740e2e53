"""Typed options with one precedence rule, shared by the agent and the collector.

Each option has a name, an environment variable, a type, a default, a validator and help
text. Precedence is: explicit argument > environment > config file > default. A value that
does not parse or validate raises :class:`SettingsError` naming the option and the value.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping, Optional, Sequence

__all__ = ["Option", "SettingsError", "resolve", "parse_bool", "parse_hostport"]


class SettingsError(ValueError):
    """A bad option value: the message names the option, the value and its source."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def parse_hostport(text: Any) -> str:
    """Accept ``host:port`` (``[v6]:port`` too) with a port in 0..65535."""
    value = str(text).strip()
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT with a port in 0..65535")
    return value


@dataclasses.dataclass(frozen=True)
class Option:
    name: str
    env: str
    type: Callable[[Any], Any]
    default: Any
    help: str
    validate: Optional[Callable[[Any], bool]] = None
    constraint: str = ""

    def convert(self, raw: Any, source: str) -> Any:
        if raw is None:
            return None
        try:
            value = self.type(raw)
        except (TypeError, ValueError) as exc:
            raise SettingsError(f"option {self.name!r} from {source}: invalid value {raw!r}: {exc}") from None
        if self.validate is not None and not self.validate(value):
            raise SettingsError(
                f"option {self.name!r} from {source}: invalid value {raw!r}: must be {self.constraint}")
        return value


def resolve(options: Sequence[Option], args: Mapping[str, Any] | None = None,
            environ: Mapping[str, str] | None = None,
            file_values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return ``{name: value}`` for every option, by precedence argument > env > file > default.

    Unknown names in ``args`` or ``file_values`` are errors, so a typo never passes silently.
    """
    args = dict(args or {})
    file_values = dict(file_values or {})
    environ = os.environ if environ is None else environ
    known = {o.name for o in options}
    for where, given in (("argument", args), ("config file", file_values)):
        unknown = sorted(set(given) - known)
        if unknown:
            raise SettingsError(f"unknown option(s) in {where}: {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(known))}")
    result: dict[str, Any] = {}
    for opt in options:
        candidates = ((args.get(opt.name), "argument"), (environ.get(opt.env), f"environment {opt.env}"),
                      (file_values.get(opt.name), "config file"))
        for raw, source in candidates:
            if raw is not None:
                result[opt.name] = opt.convert(raw, source)
                break
        else:
            result[opt.name] = opt.default
    return result


def positive(value: Any) -> bool:
    return value > 0


def non_negative(value: Any) -> bool:
    return value >= 0
