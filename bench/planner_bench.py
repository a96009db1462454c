"""Planner benchmark: `python bench/planner_bench.py [--problems 300] [--seed 0] [--ablations] [--json]`.

Same as `skinflint bench planner`; see skinflint/bench_planner.py.
"""

import argparse
import sys

from skinflint.bench_planner import main

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--problems", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ablations", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", default="bench/planner_cdf.png")
    a = ap.parse_args()
    sys.exit(main(a.problems, a.seed, a.ablations, a.json, a.plot))
