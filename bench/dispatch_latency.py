"""Front dispatch decision latency, in process: ``Router.route`` (TC time-window slot lookup +
queue choice) and the full per-frame decision (route + task message), over many arrival times.

    .venv/bin/python bench/dispatch_latency.py [PROBLEM.json ...]

Without arguments it plans the papers' examples beside the repo (``../shared/examples``) when they
exist, else a built-in two-module problem; prints p50 / p99 / max in microseconds per problem.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from core.routing import Router
from core.schema import Deployment, Payload, queue_key
from planner.models import ProblemSpec
from planner.solve import solve

BUILTIN = {
    "name": "builtin-chain",
    "slo_s": 0.5,
    "hardware": {"t4": {"price_per_hour": 0.526}, "v100": {"price_per_hour": 3.06}},
    "modules": {
        "detector": {
            "rate": 120.0,
            "profile": [
                {"hardware": "t4", "batch": b, "duration_s": 0.004 + 0.003 * b} for b in (1, 2, 4, 8, 16)
            ]
            + [{"hardware": "v100", "batch": b, "duration_s": 0.003 + 0.001 * b} for b in (1, 4, 16, 32)],
        },
        "car": {
            "rate": 300.0,
            "profile": [
                {"hardware": "t4", "batch": b, "duration_s": 0.002 + 0.002 * b} for b in (1, 4, 8, 16)
            ],
        },
    },
    "edges": [["detector", "car"]],
}


def deployment_for(problem: ProblemSpec) -> Deployment:
    plan = solve(problem)
    queues = {
        m: {
            queue_key(g, k): f"https://sqs.local/{m}-{g}-{k}"
            for g, grp in enumerate(mp.groups)
            for k in range(grp.machines)
        }
        for m, mp in plan.modules.items()
    }
    parents = {d for _, d in problem.edges}
    return Deployment(
        app=problem.name,
        version=1,
        origin_s=time.time() - 3600.0,
        slo_s=problem.slo_s,
        frame_rate=1.0,
        roots=[m for m in problem.modules if m not in parents],
        edges=[(s, d, 1.0) for s, d in problem.edges],
        plan=plan,
        queues=queues,
    )


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def bench(problem: ProblemSpec, n: int = 50_000) -> dict[str, float]:
    dep = deployment_for(problem)
    router = Router.for_deployment(dep)
    payload = Payload(content_type="image/jpeg", size=10, inline_b64="AAAA")
    modules = list(dep.plan.modules)
    rng = random.Random(0)
    now = time.time()
    times = [now + rng.uniform(0, 600) for _ in range(n)]
    route_s: list[float] = []
    full_s: list[float] = []
    for i, t in enumerate(times):
        m = modules[i % len(modules)]
        a = time.perf_counter()
        r = router.route(m, t)
        b = time.perf_counter()
        router.task(
            r, request_id="r", task_id=m, accepted_at=t, enqueued_at=t, deadline=t + 1, payload=payload
        )
        c = time.perf_counter()
        route_s.append(b - a)
        full_s.append(c - a)
    windows = sum(len(s.windows) for s in (router.schedule(m) for m in modules))
    return {
        "windows": windows,
        "route_p50_us": pct(route_s, 50) * 1e6,
        "route_p99_us": pct(route_s, 99) * 1e6,
        "route_max_us": max(route_s) * 1e6,
        "decision_p50_us": pct(full_s, 50) * 1e6,
        "decision_p99_us": pct(full_s, 99) * 1e6,
    }


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv]
    if not paths:
        examples = Path(__file__).resolve().parents[2] / "shared" / "examples"
        paths = sorted(examples.glob("*.json")) if examples.is_dir() else []
    problems = [ProblemSpec.model_validate(json.loads(p.read_text())) for p in paths]
    problems.append(ProblemSpec.model_validate(BUILTIN))
    print(
        f"{'problem':24} {'windows':>8} {'route p50':>10} {'route p99':>10} "
        f"{'route max':>10} {'decision p99':>13}"
    )
    worst = 0.0
    for prob in problems:
        r = bench(prob)
        worst = max(worst, r["decision_p99_us"])
        print(
            f"{prob.name:24} {r['windows']:8d} {r['route_p50_us']:8.1f}us {r['route_p99_us']:8.1f}us "
            f"{r['route_max_us']:8.1f}us {r['decision_p99_us']:11.1f}us"
        )
    print(f"front dispatch decision p99 (worst problem): {worst / 1e3:.3f} ms (target <= 1 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
