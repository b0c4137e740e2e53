"""The ``stepwatch`` command line: tools beside the collector and agent, never imported by them.

Each subcommand is a module of this package with ``add_parser(subparsers)``, listed once in
:data:`COMMANDS`; ``python -m stepwatch.collector.tools`` is the console script.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence

# gRPC's fork handlers off before any subcommand loads gRPC, so `stepwatch collector` may render
# /metrics in a forked child (stepwatch.collector.grpc_fork_handlers_off). Only this command
# line sets it; `stepwatch run` gives the user's command its own environment back.
GRPC_FORK_ENV_GIVEN = "GRPC_ENABLE_FORK_SUPPORT" in os.environ
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

__all__ = ["main", "build_parser", "COMMANDS"]

# Subcommand modules, in the order --help lists them.
COMMANDS = ("collector", "run", "demo", "top", "history", "replay", "analyze", "trace", "stack")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stepwatch", description="stepwatch: continuous profiler for PyTorch training")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


# What only the collector side needs (pyproject's ``collector`` extra): a training image
# installs the agent without them, and its ``stepwatch run`` / ``top`` / ``trace`` work.
COLLECTOR_EXTRA = {"prometheus_client": "prometheus-client", "grpc_health": "grpcio-health-checking"}
NEEDS_COLLECTOR_EXTRA = ("collector", "demo", "replay", "analyze", "stack")


def missing_collector_extra() -> list[str]:
    """The collector extra's packages this interpreter cannot import."""
    missing = []
    for module, package in COLLECTOR_EXTRA.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    return missing


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``stepwatch`` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    missing = missing_collector_extra() if args.command in NEEDS_COLLECTOR_EXTRA else []
    if missing:
        print(f"stepwatch {args.command}: this install lacks {', '.join(missing)} (the collector side's "
              "packages); install them with: pip install 'stepwatch[collector]'", file=sys.stderr)
        return 2
    return args.func(args)
