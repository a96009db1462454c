"""Front dispatch decision latency, in process: ``Router.route`` (TC time-window slot lookup +
queue choice) and the full per-frame decision (route + task message), over many arrival times.

    skinflint bench dispatch [PROBLEM.json ...]

Without arguments it plans the papers' examples (``examples/``) and a built-in two-module problem;
prints p50 / p99 / max in microseconds per problem.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.results import add_results_arguments, record
from core.routing import Router
from core.schema import Deployment, Payload, queue_key
from planner.models import ProblemSpec
from planner.solve import solve

if TYPE_CHECKING:
    import argparse

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BUILTIN = {
    "name": "builtin-chain",
    "slo_s": 0.5,
    "hardware": {"t4": {"price_per_hour": 0.526}, "v100": {"price_per_hour": 3.06}},
    "modules": {
        "detector": {
            "rate": 120.0,
            "profile": [
                {"hardware": "t4", "batch": batch, "duration_s": 0.004 + 0.003 * batch}
                for batch in (1, 2, 4, 8, 16)
            ]
            + [
                {"hardware": "v100", "batch": batch, "duration_s": 0.003 + 0.001 * batch}
                for batch in (1, 4, 16, 32)
            ],
        },
        "car": {
            "rate": 300.0,
            "profile": [
                {"hardware": "t4", "batch": batch, "duration_s": 0.002 + 0.002 * batch}
                for batch in (1, 4, 8, 16)
            ],
        },
    },
    "edges": [["detector", "car"]],
}


def deployment_for(problem: ProblemSpec) -> Deployment:
    plan = solve(problem)
    queues = {
        module: {
            queue_key(group_index, slot): f"https://sqs.local/{module}-{group_index}-{slot}"
            for group_index, grp in enumerate(mp.groups)
            for slot in range(grp.machines)
        }
        for module, mp in plan.modules.items()
    }
    parents = {child for _, child in problem.edges}
    return Deployment(
        app=problem.name,
        version=1,
        origin_s=time.time() - 3600.0,
        slo_s=problem.slo_s,
        frame_rate=1.0,
        roots=[module for module in problem.modules if module not in parents],
        edges=[(parent, child, 1.0) for parent, child in problem.edges],
        plan=plan,
        queues=queues,
    )


def pct(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(percent / 100 * len(ordered)))]


def bench(problem: ProblemSpec, frames: int = 50_000) -> dict[str, float]:
    dep = deployment_for(problem)
    router = Router.for_deployment(dep)
    payload = Payload(content_type="image/jpeg", size=10, inline_b64="AAAA")
    modules = list(dep.plan.modules)
    rng = random.Random(0)
    now = time.time()
    times = [now + rng.uniform(0, 600) for _ in range(frames)]
    route_s: list[float] = []
    full_s: list[float] = []
    for index, arrival in enumerate(times):
        module = modules[index % len(modules)]
        began = time.perf_counter()
        route = router.route(module, arrival)
        routed = time.perf_counter()
        router.task(
            route,
            request_id="r",
            task_id=module,
            accepted_at=arrival,
            enqueued_at=arrival,
            deadline=arrival + 1,
            payload=payload,
        )
        decided = time.perf_counter()
        route_s.append(routed - began)
        full_s.append(decided - began)
    windows = sum(len(schedule.windows) for schedule in (router.schedule(module) for module in modules))
    return {
        "windows": windows,
        "route_p50_us": pct(route_s, 50) * 1e6,
        "route_p99_us": pct(route_s, 99) * 1e6,
        "route_max_us": max(route_s) * 1e6,
        "decision_p50_us": pct(full_s, 50) * 1e6,
        "decision_p99_us": pct(full_s, 99) * 1e6,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Time the front's dispatch decision in process: Router.route (the TC time-window slot lookup and "
        "the queue choice) and the whole per-frame decision (route + task message) over many arrival "
        "times, on each problem's plan; p50 / p99 / max in microseconds (target: decision p99 <= 1 ms)."
    )
    parser.add_argument(
        "problems",
        nargs="*",
        metavar="PROBLEM.json",
        help="problems to plan and time (default: the papers' examples in examples/), plus a built-in "
        "two-module chain",
    )
    parser.add_argument(
        "--frames", type=int, default=50_000, help="decisions timed per problem (default 50000)"
    )
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    return record("dispatch", args, lambda _page: main(args.problems, args.frames))


def main(problem_paths: list[str], frames: int = 50_000) -> int:
    paths = [Path(path) for path in problem_paths] or sorted(EXAMPLES.glob("*.json"))
    problems = [ProblemSpec.model_validate(json.loads(path.read_text())) for path in paths]
    problems.append(ProblemSpec.model_validate(BUILTIN))
    print(
        f"{'problem':24} {'windows':>8} {'route p50':>10} {'route p99':>10} "
        f"{'route max':>10} {'decision p99':>13}"
    )
    worst = 0.0
    for problem in problems:
        figures = bench(problem, frames)
        worst = max(worst, figures["decision_p99_us"])
        print(
            f"{problem.name:24} {figures['windows']:8d} {figures['route_p50_us']:8.1f}us "
            f"{figures['route_p99_us']:8.1f}us {figures['route_max_us']:8.1f}us "
            f"{figures['decision_p99_us']:11.1f}us"
        )
    print(f"front dispatch decision p99 (worst problem): {worst / 1e3:.3f} ms (target <= 1 ms)")
    return 0
