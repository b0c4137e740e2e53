"""``stepwatch`` command line: ``stepwatch collector ...`` and ``stepwatch demo ...``.

Every collector flag defaults to None so that an absent flag falls through to the
environment, then the config file, then the built-in default (see ``_config``). A bad value
exits with status 2 and one line on stderr naming the option, its source and the value.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from stepwatch.agent.settings import fields_of

from .detect import describe_options
from ._config import CollectorSettings, SettingsError, configure_logging, load_settings

__all__ = ["main", "build_parser"]

# One flag per setting: --grpc-listen for grpc_listen; sections (detection) take YAML text.
_COLLECTOR_FLAGS = tuple(("--" + f.name.replace("_", "-"), f.name, spec)
                         for f, spec in fields_of(CollectorSettings))


def _add_collector(sub) -> None:
    p = sub.add_parser("collector", help="run the collector (gRPC ingest, Prometheus /metrics)",
                       description="Run the stepwatch collector until SIGTERM/SIGINT. "
                                   "Precedence: flag > environment > --config file > default.",
                       epilog="detection keys (YAML under 'detection:', defaults shown; README 'Detection'):\n"
                              + describe_options(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="YAML file mapping option names to values")
    for flag, name, spec in _COLLECTOR_FLAGS:
        extra = " (visible in ps; prefer the env var)" if spec.secret else ""
        default = "see below" if spec.section else repr(getattr(CollectorSettings, name))
        p.add_argument(flag, dest=name, metavar=name.upper(), default=None,
                       help=f"{spec.help}{extra} [env {spec.env}, default {default}]")
    p.add_argument("--ready-file", metavar="FILE",
                   help="after binding, write {\"grpc\", \"http\", \"pid\"} as JSON to FILE (atomically)")
    p.set_defaults(func=_run_collector)


def _run_collector(args: argparse.Namespace) -> int:
    try:
        settings = load_settings({name: getattr(args, name) for _, name, _ in _COLLECTOR_FLAGS},
                                 config_file=args.config)
    except SettingsError as exc:
        print(f"stepwatch collector: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    from ._app import run  # grpc and prometheus only once we really serve

    return run(settings, ready_file=args.ready_file)


# ---------------------------------------------------------------------------------------------
# demo subcommand: implemented in collector/_demo.py (written separately).
# ---------------------------------------------------------------------------------------------
def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="run a demo training job against a local collector")
    p.add_argument("--steps", type=int, default=300, help="training steps to run (default 300)")
    p.add_argument("--no-stack", action="store_true", help="do not start Prometheus/Grafana alongside")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from stepwatch.collector._demo import main as demo_main

    return demo_main(args)


# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stepwatch", description="stepwatch: continuous profiler for PyTorch training")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_collector(sub)
    _add_demo(sub)
    from ._replay import add_parser as _add_replay  # stepwatch replay: collector/_replay.py

    _add_replay(sub)
    from ._trace_cli import add_parser as _add_trace  # stepwatch trace: collector/_trace_cli.py

    _add_trace(sub)
    from ._stack import add_parser as _add_stack  # stepwatch stack: collector/_stack.py

    _add_stack(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``stepwatch`` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
