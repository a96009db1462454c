"""The dated results page every benchmark writes: ``<DIR>/<YYYY-MM-DD>-<bench>.md``.

A page holds the command line, the date, the machine (platform, Python, CPU count, the load averages at the
start and the end of the run), the run's wall time and exit status, what the run printed (its tables, or
its JSON with ``--json``, verbatim but for terminal colour codes) and links to the plots it wrote. Every
benchmark adds the options with :func:`add_results_arguments` and runs its body through :func:`record`;
what the run prints on stdout is unchanged (the page gets a copy). A second run on the same day replaces
the page.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import platform
import re
import sys
import time
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

__all__ = [
    "DEFAULT_DIR",
    "Machine",
    "Recording",
    "add_results_arguments",
    "command_line",
    "emit",
    "page_path",
    "record",
    "render_page",
]

DEFAULT_DIR = "docs/results"
#: Terminal control sequences (CSI: colours, cursor moves; OSC: hyperlinks) that rich writes to a terminal.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def add_results_arguments(parser: argparse.ArgumentParser) -> None:
    """``--results DIR`` and ``--no-results``, the same on every benchmark."""
    parser.add_argument(
        "--results",
        metavar="DIR",
        default=DEFAULT_DIR,
        help=f"write the dated results page DIR/<YYYY-MM-DD>-<bench>.md (default {DEFAULT_DIR})",
    )
    parser.add_argument("--no-results", action="store_true", help="write no results page")


@dataclass(frozen=True)
class Machine:
    """Where a run ran: platform, Python, CPU count and the 1, 5 and 15-minute load averages."""

    platform: str
    python: str
    cpus: int | None
    load_avg: tuple[float, float, float]

    @classmethod
    def now(cls) -> Machine:
        return cls(platform.platform(), platform.python_version(), os.cpu_count(), os.getloadavg())


@dataclass
class Recording:
    """One run being recorded: the bench fills :attr:`plots` with the paths of the plots it wrote."""

    bench: str
    command: str
    started: dt.datetime
    start: Machine
    plots: list[str] = field(default_factory=list)


def command_line(bench: str, args: argparse.Namespace) -> str:
    """The command as typed (the CLI stores it on ``args.command_line``), else ``skinflint bench <bench>``."""
    return str(getattr(args, "command_line", None) or f"skinflint bench {bench}")


def page_path(directory: str | Path, bench: str, day: dt.date) -> Path:
    return Path(directory) / f"{day.isoformat()}-{bench}.md"


class _Tee(io.StringIO):
    """stdout that also keeps a copy; asks the real stream whether it is a terminal (rich's colours and
    widths stay what they were)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text)
        return super().write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


def record(bench: str, args: argparse.Namespace, body: Callable[[Recording], int]) -> int:
    """Run ``body`` with stdout copied, then write its page (unless ``args.no_results``) and say where on
    stderr. Returns ``body``'s exit status; an exception from ``body`` propagates and writes no page."""
    recording = Recording(bench, command_line(bench, args), dt.datetime.now().astimezone(), Machine.now())
    began = time.perf_counter()
    tee = _Tee(sys.stdout)
    with redirect_stdout(tee):
        status = body(recording)
    if getattr(args, "no_results", False):
        return status
    wall_s = time.perf_counter() - began
    path = page_path(getattr(args, "results", DEFAULT_DIR), bench, recording.started.date())
    page = render_page(recording, Machine.now(), wall_s, status, tee.getvalue(), path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        print(f"results page not written: {exc}", file=sys.stderr)
    else:
        print(f"results page: {path}", file=sys.stderr)
    return status


def _load(machine: Machine) -> str:
    return ", ".join(f"{load:.2f}" for load in machine.load_avg)


def render_page(
    recording: Recording, end: Machine, wall_s: float, status: int, printed: str, directory: Path
) -> str:
    """The page's Markdown; plot links are relative to ``directory`` (where the page goes)."""
    start = recording.start
    lines = [
        f"# {recording.bench} benchmark, {recording.started.date().isoformat()}",
        "",
        "```sh",
        recording.command,
        "```",
        "",
        "| | |",
        "|---|---|",
        f"| date | {recording.started.isoformat(timespec='seconds')} |",
        f"| machine | {start.platform}, Python {start.python}, {start.cpus} CPUs |",
        f"| load average (1, 5, 15 min) at the start | {_load(start)} |",
        f"| load average (1, 5, 15 min) at the end | {_load(end)} |",
        f"| wall time | {wall_s:.1f} s |",
        f"| exit status | {status} |",
        "",
        "## Figures",
        "",
        "```text",
        _ANSI.sub("", printed).rstrip("\n"),
        "```",
    ]
    if recording.plots:
        lines += ["", "## Plots", ""]
        for plot in recording.plots:
            link = Path(os.path.relpath(Path(plot).resolve(), directory.resolve())).as_posix()
            lines.append(f"![{Path(plot).name}]({link})")
    return "\n".join(lines) + "\n"


def emit(
    result: dict[str, Any],
    as_json: bool,
    plot: str | None,
    page: Recording | None,
    plot_fn: Callable[[dict[str, Any], str], None],
    render: Callable[[dict[str, Any]], None],
) -> None:
    """Finish a run whose ``result`` holds its figures and, under ``_raw``, what only its tables read:
    the plot written with ``plot_fn`` (and named in the JSON and on the page), then the JSON without
    ``_raw`` or the tables."""
    if plot:
        plot_fn(result, plot)
        result["plot"] = plot
        if page is not None:
            page.plots.append(plot)
    raw = result.pop("_raw")
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        render({**result, "_raw": raw})
        if plot:
            print(f"CDF plot: {plot}")


def host_line(result: dict[str, Any]) -> str:
    """The last line of a run's tables: its wall time, the machine's CPUs and the load around it (from
    ``result["wall_s"]`` and ``result["host"]``: ``cpus``, ``load_avg_start``, ``load_avg_end``)."""
    host = result["host"]
    load = ", ".join(f"{x:.1f}" for x in host["load_avg_start"]) + " -> "
    load += ", ".join(f"{x:.1f}" for x in host["load_avg_end"])
    return f"{result['wall_s']:.0f} s wall, {host['cpus']} CPUs, load avg {load}"
