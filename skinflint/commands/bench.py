"""`skinflint bench <name>`: the benchmarks of the ``bench`` package (figures, tables, plots, a dated page).

Each benchmark defines its own flags (``bench.<module>.add_arguments``); this command lists them from
:data:`bench.BENCHES` and fills a benchmark's parser from its module only when that benchmark is parsed,
so ``skinflint --help`` and the other commands do not import the planner, numpy and pydantic.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
from typing import TYPE_CHECKING, Any

from bench import BENCHES
from bench.errors import BenchError
from skinflint.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType


class BenchParser(argparse.ArgumentParser):
    """A benchmark's parser, filled by its module's ``add_arguments`` the first time it parses (``--help``
    included); stores the command as typed on ``args.command_line`` for the results page."""

    def __init__(self, *args: Any, bench_module: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bench_module = bench_module

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.bench_module:
            module = importlib.import_module(self.bench_module)
            self.bench_module = ""
            module.add_arguments(self)
            self.set_defaults(func=lambda parsed: _run(module, parsed))
        parsed, rest = super().parse_known_args(args, namespace)
        typed = shlex.join(list(args or []))
        parsed.command_line = f"{self.prog} {typed}".strip()
        return parsed, rest


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bench",
        help="run a benchmark: print its figures, write its dated page under docs/results/",
        description="Run a benchmark: print its figures and write a dated results page "
        "(docs/results/<YYYY-MM-DD>-<bench>.md: the command, the date, the machine and its load, the "
        "figures, links to the plots). `skinflint bench BENCH --help` lists a benchmark's options.",
    )
    benches = parser.add_subparsers(dest="bench", metavar="BENCH", required=True, parser_class=BenchParser)
    for bench in BENCHES:
        benches.add_parser(bench.name, help=bench.summary, bench_module=bench.module)


def _run(module: ModuleType, args: argparse.Namespace) -> int:
    try:
        return int(module.run_command(args))
    except BenchError as exc:
        raise UsageError((str(exc).splitlines() or [type(exc).__name__])[0]) from exc
