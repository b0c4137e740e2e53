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
