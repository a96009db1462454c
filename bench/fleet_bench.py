"""Fleet benchmark: `python bench/fleet_bench.py [--apps 100] [--seed 0] [--seeds 5] [--solver S] [--json]
[--plot F]`.

Same as `skinflint bench fleet`; see skinflint/bench_fleet.py.
"""

import argparse
import sys

from skinflint.bench_fleet import main

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--apps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sizes", default="10,30")
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--solver", choices=("dispatchable", "plain"), default="dispatchable")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", default="docs/fleet_packing.png")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
    sys.exit(
        main(
            a.apps,
            a.seed,
            a.json,
            a.plot,
            seeds=a.seeds,
            sizes=sizes,
            epochs=a.epochs,
            noise=a.noise,
            solver=a.solver,
        )
    )
