"""`skinflint bench`: every benchmark listed, each with its own flags (defined once, in its module) and the
results options, imported only when asked for; tiny runs of the quick ones."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from bench import BENCHES
from skinflint.cli import main

if TYPE_CHECKING:
    from pathlib import Path


def test_bench_help_lists_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert {bench.name for bench in BENCHES} == {
        "planner",
        "fleet",
        "diurnal",
        "simulator",
        "dispatch",
        "profiles",
        "tco",
        "abuse",
        "gpu-derive",
        "gpu-check",
    }
    for bench in BENCHES:
        assert bench.name in out


@pytest.mark.parametrize("name", [bench.name for bench in BENCHES])
def test_each_benchmark_has_its_help_and_the_results_options(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", name, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert f"usage: skinflint bench {name}" in out and "--results DIR" in out and "--no-results" in out


def test_the_cli_imports_no_benchmark_module_to_build_its_parser() -> None:
    code = (
        "import sys; from skinflint.cli import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith('bench.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['bench.errors']"


def test_a_tiny_dispatch_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "dispatch", "--frames", "200", "--no-results"]) == 0
    out = capsys.readouterr().out
    assert "builtin-chain" in out and "harpagon_m1" in out and "front dispatch decision p99" in out
    assert not (tmp_path / "docs").exists()


def test_a_tiny_simulator_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "simulator", "--check", "--duration", "2", "--json"]) == 0
    runs = capsys.readouterr().out
    assert '"dispatch": "rr"' in runs and '"all_within_plan": true' in runs


def test_a_tiny_fleet_run(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "fleet", "--apps", "3", "--seeds", "1", "--sizes", "2", "--epochs", "6"]
    assert main([*argv, "--steady-runs", "1", "--plot", ""]) == 0
    out = capsys.readouterr().out
    assert "billed cost after packing" in out and "steady-load target met in" in out


def test_bad_fleet_sizes_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "fleet", "--sizes", "x"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["skinflint: error: --sizes must be comma-separated integers, got 'x'"]
