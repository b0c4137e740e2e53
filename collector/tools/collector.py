"""``stepwatch collector``: run the collector until SIGTERM/SIGINT.

Every flag defaults to None so that an absent flag falls through to the environment, then the
config file, then the built-in default (:mod:`stepwatch.collector._config`). A bad value exits
with status 2 and one line on stderr naming the option, its source and the value.
"""

from __future__ import annotations

import argparse
import sys

from stepwatch.core.settings import fields_of

from .._config import CollectorSettings, SettingsError, configure_logging, load_settings
from ..detect import describe_options

__all__ = ["add_parser"]

# One flag per setting: --grpc-listen for grpc_listen; sections (detection) take YAML text.
_FLAGS = tuple(("--" + f.name.replace("_", "-"), f.name, spec) for f, spec in fields_of(CollectorSettings))


def add_parser(sub) -> None:
    p = sub.add_parser("collector", help="run the collector (gRPC ingest, Prometheus /metrics)",
                       description="Run the stepwatch collector until SIGTERM/SIGINT. "
                                   "Precedence: flag > environment > --config file > default.",
                       epilog="detection keys (YAML under 'detection:', defaults shown; docs/configuration.md):\n"
                              + describe_options(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="YAML file mapping option names to values")
    for flag, name, spec in _FLAGS:
        extra = " (visible in ps; prefer the env var)" if spec.secret else ""
        default = "see below" if spec.section else repr(getattr(CollectorSettings, name))
        # A yes/no option works as a bare flag (--insecure) and with a value (--insecure false).
        bare = {"nargs": "?", "const": "true"} if isinstance(getattr(CollectorSettings, name, None), bool) else {}
        p.add_argument(flag, dest=name, metavar=name.upper(), default=None, **bare,
                       help=f"{spec.help}{extra} [env {spec.env}, default {default}]")
    p.add_argument("--ready-file", metavar="FILE",
                   help="after binding, write {\"grpc\", \"http\", \"pid\"} as JSON to FILE (atomically)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings({name: getattr(args, name) for _, name, _ in _FLAGS},
                                 config_file=args.config)
    except SettingsError as exc:
        print(f"stepwatch collector: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    from .._app import run as serve  # grpc and prometheus only once we really serve

    return serve(settings, ready_file=args.ready_file)
