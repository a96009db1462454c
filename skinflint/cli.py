"""The ``skinflint`` console script.

Each sub-command lives in ``skinflint/commands/<name>.py`` and exposes ``register(subparsers)``;
the module is imported only to build the parser, and heavy imports happen inside the handlers so
``skinflint --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING

from skinflint import __version__
from skinflint.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Sequence

# Order here is the order in `skinflint --help`.
COMMAND_MODULES: list[str] = [
    "skinflint.commands.plan",
    "skinflint.commands.bench",
    "skinflint.commands.profile",
    "skinflint.commands.models",
    "skinflint.commands.up",
    "skinflint.commands.demo",
    "skinflint.commands.apps",
    "skinflint.commands.status",
    "skinflint.commands.results",
    "skinflint.commands.loadtest",
    "skinflint.commands.report",
    "skinflint.commands.deploy",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skinflint",
        description="Serve video-analytics DNN pipelines at minimum cost under an end-to-end latency SLO.",
    )
    parser.add_argument("--version", action="version", version=f"skinflint {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as err:
        print(f"skinflint: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("skinflint: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``skinflint ... | head``): stop without a traceback
        _stdout_to_devnull()
        return 1


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not fail on the closed pipe
    (the recipe of the Python docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
