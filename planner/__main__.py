"""``python -m planner solve PROBLEM.json [--policy P] [--objective O]`` (docs/design.md §3 contract)."""

import sys

from planner.cli import main

sys.exit(main())
