"""Import boundaries (pyproject.toml [tool.importlinter]) checked with import-linter.

The installed package is an editable namespace mapping, which import-linter cannot walk, so
the test copies the package directories into a plain ``stepwatch`` package first, as
pyproject.toml's package-dir maps them. A
second run adds one forbidden import to the copy and must fail: the check can fail.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def lint(tmp_path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.fail("lint-imports not installed (the test extra has import-linter)")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), NO_COLOR="1")
    return subprocess.run([exe, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path):
    pkg = tmp_path / "stepwatch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    skip = shutil.ignore_patterns("__pycache__")
    for name in ("agent", "collector", "core", "proto"):
        shutil.copytree(ROOT / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__", "integrations", "_root"))
    shutil.copytree(ROOT / "agent" / "integrations", pkg / "integrations", ignore=skip)
    return tmp_path


def test_import_contracts_hold(tree):
    run = lint(tree)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Contracts: 6 kept, 0 broken" in run.stdout, run.stdout


def test_a_forbidden_import_is_caught(tree):
    (tree / "stepwatch" / "agent" / "_leak.py").write_text("from stepwatch.collector.state import _state\n")
    run = lint(tree)
    assert run.returncode != 0
    assert "The agent and the integrations never import the collector BROKEN" in run.stdout, run.stdout


def test_the_collector_loading_the_agent_is_caught(tree):
    (tree / "stepwatch" / "collector" / "ingest" / "_leak.py").write_text("from stepwatch.agent import _steps\n")
    run = lint(tree)
    assert run.returncode != 0
    assert "The collector never loads the agent, only its tools run agent code BROKEN" in run.stdout, run.stdout


def test_reaching_into_another_rooms_private_module_is_caught(tree):
    (tree / "stepwatch" / "collector" / "api" / "_leak.py").write_text(
        "from stepwatch.collector.state._state import CollectorState\n")
    run = lint(tree)
    assert run.returncode != 0
    assert "The collector's rooms are reached through their faces BROKEN" in run.stdout, run.stdout
    assert "stepwatch.collector.api._leak -> stepwatch.collector.state._state" in run.stdout, run.stdout
