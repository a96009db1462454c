"""A reader that goes away (``skinflint plan ... --json | head``) ends the command quietly: exit 1, no
traceback on stderr (the Python docs' recipe for SIGPIPE)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "examples" / "harpagon_m1.json")


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "planner", "solve", EXAMPLE],
        ["-c", "import sys; from skinflint.cli import main; sys.exit(main())", "plan", EXAMPLE, "--json"],
    ],
    ids=["planner solve", "skinflint plan"],
)
def test_a_closed_stdout_is_not_a_traceback(argv: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
