"""The dated results page (bench/results.py): what it holds, where it goes, and a tiny real run through
`skinflint bench planner` (stdout unchanged, the page beside it)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import TYPE_CHECKING

from bench.results import Machine, Recording, page_path, record, render_page
from skinflint.cli import main

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

STARTED = dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC)


def _args(**values: object) -> argparse.Namespace:
    return argparse.Namespace(**{"results": "docs/results", "no_results": False, **values})


def test_the_page_holds_the_command_date_machine_load_figures_and_plots(tmp_path: Path) -> None:
    start = Machine("Linux-x86_64", "3.11.7", 8, (0.5, 0.25, 0.125))
    end = Machine("Linux-x86_64", "3.11.7", 8, (1.5, 0.75, 0.375))
    recording = Recording("planner", "skinflint bench planner --problems 3", STARTED, start)
    recording.plots.append(str(tmp_path / "plots" / "cdf.png"))
    page = render_page(recording, end, 12.34, 0, "\x1b[1mtable\x1b[0m row\n", tmp_path / "results")
    assert page.startswith("# planner benchmark, 2025-03-04\n")
    assert "skinflint bench planner --problems 3" in page
    assert "| date | 2025-03-04T05:06:07+00:00 |" in page
    assert "| machine | Linux-x86_64, Python 3.11.7, 8 CPUs |" in page
    assert "| load average (1, 5, 15 min) at the start | 0.50, 0.25, 0.12 |" in page
    assert "| load average (1, 5, 15 min) at the end | 1.50, 0.75, 0.38 |" in page
    assert "| wall time | 12.3 s |" in page and "| exit status | 0 |" in page
    assert "```text\ntable row\n```" in page  # colour codes stripped
    assert "![cdf.png](../plots/cdf.png)" in page


def test_record_copies_stdout_and_writes_the_dated_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def body(page: Recording) -> int:
        print("figures")
        page.plots.append(str(tmp_path / "p.png"))
        return 3

    status = record("demo", _args(results=str(tmp_path / "out"), command_line="skinflint bench demo"), body)
    captured = capsys.readouterr()
    assert status == 3 and captured.out == "figures\n"
    written = list((tmp_path / "out").iterdir())
    assert [path.name for path in written] == [page_path(".", "demo", dt.date.today()).name]
    text = written[0].read_text()
    assert "```sh\nskinflint bench demo\n```" in text and "figures" in text and "| exit status | 3 |" in text
    assert "![p.png](../p.png)" in text and f"results page: {written[0]}" in captured.err


def test_no_results_writes_no_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert record("demo", _args(results=str(tmp_path), no_results=True), lambda _page: 0) == 0
    assert list(tmp_path.iterdir()) == [] and capsys.readouterr().err == ""


def test_a_tiny_planner_run_writes_its_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "planner", "--problems", "3", "--plot", "cdf.png", "--results", "res"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "billed objective" in out and "CDF plot: cdf.png" in out
    page = (tmp_path / "res" / f"{dt.date.today().isoformat()}-planner.md").read_text()
    assert "skinflint bench planner --problems 3 --plot cdf.png --results res" in page
    assert "billed objective" in page and "CDF plot: cdf.png" in page
    assert "![cdf.png](../cdf.png)" in page and (tmp_path / "cdf.png").is_file()


def test_json_output_is_unchanged_and_copied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "planner", "--problems", "2", "--plot", "", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["problems"] == 2 and "plot" not in doc
    page = (tmp_path / "docs" / "results" / f"{dt.date.today().isoformat()}-planner.md").read_text()
    assert '"problems": 2' in page
