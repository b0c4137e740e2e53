"""Every Python package folder in the repo is listed in pyproject (a wheel would miss it)."""

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_all_package_dirs_are_listed():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    found = set()
    mapped = {(ROOT / folder).resolve(): prefix for prefix, folder in tool["package-dir"].items()}
    for prefix, folder in tool["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if mapped.get(init.parent.resolve(), prefix) != prefix:
                continue  # a folder installed under its own name (agent/integrations)
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((prefix, *rel)))
    assert found == listed


def test_import_stepwatch_exposes_the_subpackages_lazily():
    """``import stepwatch; stepwatch.agent.attach`` works, and ``import stepwatch`` alone imports
    neither torch nor the agent (a fresh interpreter)."""
    import subprocess
    import sys
    code = ("import sys, stepwatch\n"
            "assert 'torch' not in sys.modules and 'stepwatch.agent' not in sys.modules\n"
            "assert callable(stepwatch.agent.attach) and stepwatch.collector.__name__ == 'stepwatch.collector'\n"
            "assert 'agent' in dir(stepwatch)\n"
            "try:\n    stepwatch.nope\nexcept AttributeError as e:\n    print(e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "module 'stepwatch' has no attribute 'nope'"
