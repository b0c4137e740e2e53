"""deploy/prometheus/examples: valid for the Prometheus that runs them (promtool check config)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dashboard_check import DEPLOY

EXAMPLES = sorted((DEPLOY / "prometheus" / "examples").glob("*.yml"))


def test_there_are_examples_for_dns_discovery_and_federation():
    assert {p.name for p in EXAMPLES} == {"replicas-dns-sd.yml", "global-federation.yml"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian prometheus)")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_promtool(path):
    run = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout
