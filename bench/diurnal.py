"""Diurnal scale scenario: `python bench/diurnal.py [--apps 24] [--peak 100000] [--epochs 96] [--json]
[--plots DIR] ...`.

Same as `skinflint bench diurnal` (every option passes through); see skinflint/bench_diurnal.py and
docs/scale.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skinflint.cli import main  # noqa: E402 -- after the path set-up, so the script runs from a checkout

if __name__ == "__main__":
    sys.exit(main(["bench", "diurnal", *sys.argv[1:]]))
