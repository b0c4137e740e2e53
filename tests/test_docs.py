"""The docs say what the code is: the options tables equal the settings model, every link and
file name in them exists, and the README stays one screen for users."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("options_doc", ROOT / "docs" / "options_doc.py")
options_doc = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(options_doc)
DOCS = sorted((ROOT / "docs").glob("*.md"))
FILE = re.compile(r"`([A-Za-z0-9_./-]+\.(?:py|proto|yml|yaml|sh|md|json|jsonl\.gz))`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_options_tables_equal_the_settings_model():
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert options_doc.render(text) == text, (
        "docs/configuration.md's options tables differ from the settings model: run "
        "make docs")


def test_a_missing_option_row_is_caught(tmp_path):
    """The check above can fail: a table with one option's row removed is rewritten, and the
    command-line check exits 1 on it."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `spool_max_bytes` |"))
    stale = tmp_path / "configuration.md"
    stale.write_text(text.replace(row + "\n", ""))
    assert options_doc.render(stale.read_text()) == text
    assert options_doc.main(["--check", str(stale)]) == 1
    assert options_doc.main(["--check", str(ROOT / "docs" / "configuration.md")]) == 0


def test_every_option_is_in_the_docs_with_its_environment_variable():
    from stepwatch.agent._options import AgentSettings
    from stepwatch.core.settings import describe
    from stepwatch.collector._config import CollectorSettings

    text = (ROOT / "docs" / "configuration.md").read_text()
    for cls in (AgentSettings, CollectorSettings):
        for name, env, _default, _help in describe(cls):
            key = name.removeprefix("detection.")
            assert f"| `{key}` |" in text, f"{name} is missing from docs/configuration.md"
            if env:
                assert f"`{env}`" in text, f"{env} is missing from docs/configuration.md"


def test_the_readme_is_one_screen_with_the_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150, len(text.splitlines())
    assert "make demo" in text and "make test" in text


@pytest.mark.parametrize("doc", [ROOT / "README.md"] + DOCS, ids=lambda p: p.name)
def test_every_link_points_at_a_file_that_exists(doc):
    for target in LINK.findall(doc.read_text()):
        if "://" in target:
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"


def test_every_file_the_architecture_names_exists():
    """A bare name (`_drift.py`) must exist somewhere in the tree, a path from the repository
    root or from a package; the team's brief outside the repository is the one exception."""
    skip = {".venv", ".git", "build", ".hypothesis", ".pytest_cache"}
    names = {p.name for p in ROOT.rglob("*") if not skip.intersection(p.parts)}
    for doc in [ROOT / "docs" / "ARCHITECTURE.md"] + DOCS:
        for ref in FILE.findall(doc.read_text()):
            if ref.startswith("shared/"):
                continue
            if "/" not in ref:
                assert ref in names, f"{doc.name} names {ref}, which is not in the tree"
                continue
            bases = [ROOT, ROOT / "collector", ROOT / "agent", ROOT / "tests"]
            assert any((b / ref).exists() for b in bases), f"{doc.name} names {ref}, which does not exist"


def test_the_architecture_layout_names_every_module_of_the_tree():
    """Every module of core/, agent/ (and its sidecar) and the collector's rooms is named in
    docs/ARCHITECTURE.md's layout block, and every name there exists: the layout is the tree."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = text[text.index("## Layout"):text.index("Import boundaries, enforced")]
    named = set(re.findall(r"\b(_?[a-z][a-z0-9_]*\.py)\b", block))
    rooms = ["core", "agent", "agent/_sidecar", "collector"] + [
        f"collector/{room}" for room in ("ingest", "wire", "state", "export", "api", "alerting", "why", "detect")]
    for room in rooms:
        for path in sorted((ROOT / room).glob("*.py")):
            if path.name not in ("__init__.py", "__main__.py"):
                assert path.name in named, f"{room}/{path.name} is not in docs/ARCHITECTURE.md's layout"
    present = {p.name for room in rooms + ["agent/integrations", "collector/tools"]
               for p in (ROOT / room).glob("*.py")}
    for name in named:
        assert name in present, f"docs/ARCHITECTURE.md's layout names {name}, which is not in the tree"


def test_the_collectors_docstrings_and_comments_carry_no_history():
    """Code says what is true now: no dates and no "previously" / "formerly" / "used to" / "the
    old code" in the collector's docstrings and comments (history goes to commit messages and
    bench/results/)."""
    import ast
    import io
    import tokenize

    history = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bpreviously\b|\bformerly\b|\bused to\b|\bthe old code\b|"
                         r"\bbefore the fix\b", re.I)
    found = []
    for path in sorted((ROOT / "collector").rglob("*.py")):
        if path.name.endswith("_pb2.py") or path.name.endswith("_pb2_grpc.py"):
            continue
        src = path.read_text()
        texts = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(src).readline)
                 if tok.type == tokenize.COMMENT]
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    texts.append((getattr(node, "lineno", 1), doc))
        found += [f"{path.relative_to(ROOT)}:{line}: {history.search(t).group(0)!r}"
                  for line, t in texts if history.search(t)]
    assert not found, found
