"""The options tables of docs/configuration.md, generated from the settings model.

    python docs/options_doc.py --write docs/configuration.md   # make docs
    python docs/options_doc.py --check docs/configuration.md   # exit 1 if stale

Each table sits between ``<!-- options:NAME -->`` and ``<!-- /options:NAME -->`` in the file
(NAME: ``agent``, ``collector``, ``detection``); what lies outside the markers is left as written.
The tables list every option of ``AgentSettings`` and ``CollectorSettings`` (the detection
section walked), with its environment variable, default and help text, so a new option cannot
be missing from the docs (tests/test_docs.py checks the file). A development tool beside the
docs, not part of the package: it reads the agent's private settings class, which the collector
package may not import.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from typing import Any, Iterable

from stepwatch.agent._options import AgentSettings
from stepwatch.core.settings import describe
from stepwatch.collector._config import CollectorSettings

__all__ = ["tables", "render", "main"]

_HEX = ("throttle_mask",)


def _default(name: str, value: Any) -> str:
    """A default as a user would write it: sizes in MiB/GiB, a per-user temp directory as
    ``$TMPDIR/stepwatch-$UID/...``, booleans as true/false."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return "empty"
    if isinstance(value, int) and name.endswith("_bytes"):
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if value >= 1 << shift and value % (1 << shift) == 0:
                return f"{value >> shift} {unit}"
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    mine = os.path.join(tempfile.gettempdir(), "stepwatch-")
    if text.startswith(mine):  # <temp>/stepwatch-<uid>/<name>
        rest = text[len(mine):].split(os.sep, 1)
        text = "$TMPDIR/stepwatch-$UID" + (os.sep + rest[1] if len(rest) > 1 else "")
    return text


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _rows(items: Iterable[tuple[str, str, Any, str]], env: bool, strip: str = "") -> list[str]:
    head = "| option | environment | default | meaning |" if env else "| key | default | meaning |"
    rows = [head, "|---|---|---|---|" if env else "|---|---|---|"]
    for name, var, default, help_text in items:
        shown = _default(name, default)
        key = name[len(strip):] if strip and name.startswith(strip) else name
        cells = [f"`{key}`"] + ([f"`{var}`" if var else "-"] if env else []) + [f"`{shown}`", _cell(help_text)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def tables() -> dict[str, str]:
    """``{"agent": markdown, "collector": markdown, "detection": markdown}``."""
    collector = list(describe(CollectorSettings, hex_names=_HEX))
    return {
        "agent": "\n".join(_rows(describe(AgentSettings), env=True)),
        "collector": "\n".join(_rows((o for o in collector if not o[0].startswith("detection.")), env=True)),
        "detection": "\n".join(_rows((o for o in collector if o[0].startswith("detection.")), env=False,
                                     strip="detection.")),
    }


def render(text: str) -> str:
    """``text`` with every marked table replaced by the generated one; ValueError naming a
    marker that is missing."""
    for name, table in tables().items():
        begin, end = f"<!-- options:{name} -->", f"<!-- /options:{name} -->"
        if begin not in text or end not in text:
            raise ValueError(f"options_doc: {begin} ... {end} not found")
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        text = pattern.sub(lambda _m, b=begin, t=table, e=end: f"{b}\n{t}\n{e}", text, count=1)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python docs/options_doc.py",
                                description=__doc__.splitlines()[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", metavar="FILE", help="replace the marked tables in FILE")
    what.add_argument("--check", metavar="FILE", help="exit 1 when FILE's tables differ from the settings model")
    a = p.parse_args(argv)
    path = a.write or a.check
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    new = render(text)
    if a.check:
        if new != text:
            print(f"{path}: the options tables differ from the settings model; run "
                  f"python docs/options_doc.py --write {path}", file=sys.stderr)
            return 1
        return 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
