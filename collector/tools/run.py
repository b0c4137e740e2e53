"""``stepwatch run [options] -- COMMAND ...``: profile an unmodified training program.

Puts stepwatch's ``sitecustomize`` first on PYTHONPATH and sets STEPWATCH_AUTO_ATTACH=1, then
replaces itself with COMMAND (exec: signals and the exit status are the program's own). Every
Python process COMMAND starts (``python train.py``, ``torchrun ...``, ``srun python ...``)
inherits both; each one that steps an optimizer attaches the agent at its first step (see
agent/_autorun/sitecustomize.py). ``--collector`` / ``--job`` / ``--token`` set the agent's
STEPWATCH_COLLECTOR / STEPWATCH_JOB / STEPWATCH_TOKEN; every other agent option is its
STEPWATCH_* environment variable as usual.
"""

from __future__ import annotations

import argparse
import os
import sys

import stepwatch.agent as _agent_pkg

__all__ = ["add_parser", "run", "autorun_dir", "environment"]


def autorun_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(_agent_pkg.__file__)), "_autorun")


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run an unmodified training command with the agent attached",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--collector", metavar="HOST:PORT", help="collector gRPC address [env STEPWATCH_COLLECTOR]")
    p.add_argument("--job", help="job name (default: the scheduler's, or the script's name) [env STEPWATCH_JOB]")
    p.add_argument("--token", help="collector auth token (visible in ps; prefer the env var) [env STEPWATCH_TOKEN]")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS ...]")
    p.set_defaults(func=run)


def environment(args: argparse.Namespace, base: dict) -> dict:
    env = dict(base)
    from . import GRPC_FORK_ENV_GIVEN
    if not GRPC_FORK_ENV_GIVEN:  # set by this command line for its own collector, not the user's
        env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = autorun_dir() + (os.pathsep + path if path else "")
    env["STEPWATCH_AUTO_ATTACH"] = "1"
    for flag, name in (("collector", "STEPWATCH_COLLECTOR"), ("job", "STEPWATCH_JOB"), ("token", "STEPWATCH_TOKEN")):
        if getattr(args, flag):
            env[name] = getattr(args, flag)
    return env


def _check_flags(args: argparse.Namespace) -> str:
    """The flags' values checked as the agent will check them, so a bad one is reported as the
    flag typed here (not as the environment variable it becomes); "" when all are good."""
    given = {name: getattr(args, name) for name in ("collector", "job") if getattr(args, name)}
    problem = _agent_pkg.check_options(**given)
    return problem.replace("option '", "--", 1).replace("' from argument", "", 1)


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("stepwatch run: error: no command given (stepwatch run [options] -- COMMAND ...)", file=sys.stderr)
        return 2
    bad = _check_flags(args)
    if bad:
        print(f"stepwatch run: error: {bad}", file=sys.stderr)
        return 2
    env = environment(args, dict(os.environ))
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"stepwatch run: error: cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 0  # not reached
