"""Hand-made plans for the simulator benchmark: a 100,000 req/s three-module plan on ~1,000 machines and
the papers' examples as their tables give them (no solver), each made dispatch-realisable the way
:mod:`planner.robust` does it."""

from __future__ import annotations

import math
from pathlib import Path

from bench.errors import BenchError
from planner.dispatch import theorem1_latencies
from planner.models import MachineGroup, ModulePlan, Plan, ProblemSpec
from planner.robust import annotate, realise

__all__ = ["EXAMPLES", "dispatchable", "example_plans", "large_problem"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _module_plan(groups: list[MachineGroup], rate: float) -> ModulePlan:
    mp = ModulePlan(latency_budget_s=0.0, worst_case_latency_s=0.0, groups=groups)
    wcl = max(theorem1_latencies(mp))
    planned = sum(group.machines * group.rate_per_machine for group in groups)
    return ModulePlan(
        latency_budget_s=wcl, worst_case_latency_s=wcl, dummy_rate=planned - rate, groups=groups
    )


def dispatchable(problem: ProblemSpec, plan: Plan) -> Plan:
    """A hand-made plan made dispatch-realisable: each child whose bursts could overlap gets whole
    machines of its (single, full-throughput) configuration until its capacity covers the spread rate
    its bursts need; then every module's worst case is the realised figure
    (:func:`planner.robust.annotate`)."""
    for _ in range(8):
        real = realise(problem, plan)
        short = {
            module: realised
            for module, realised in real.items()
            if realised.guaranteed and not realised.collision_free
        }
        if not short:
            return annotate(problem, plan, real)
        modules = dict(plan.modules)
        for module, realised in short.items():
            (group,) = plan.modules[module].groups  # hand plans: one configuration per child
            throughput = group.concurrency * group.batch / group.duration_s
            need = max(realised.required_rate, problem.modules[module].rate) * (1 + 1e-6)
            groups = [
                group.model_copy(
                    update={"machines": max(group.machines, math.ceil(need / throughput - 1e-9))}
                )
            ]
            modules[module] = _module_plan(groups, problem.modules[module].rate)
        plan = plan.model_copy(update={"modules": modules})
    raise BenchError("could not size the hand-made plan's children")


def large_problem() -> tuple[ProblemSpec, Plan]:
    """100,000 req/s in total: detector 50k, car 30k, person 20k. The detector runs 500 full batch-8
    machines; the children's machine counts come from their bursts (:func:`dispatchable`)."""
    gpu = {"hardware": "gpu"}
    groups = {
        # t = c*b/d = 100 req/s; 500 * 100 = 50,000 (windows 8/50,000 s: 0.16 ms)
        "detector": [MachineGroup(**gpu, batch=8, machines=500, rate_per_machine=100.0, duration_s=0.08)],
        # t = 2*4/0.05 = 160: a detector batch sends ceil(0.6 * 8) = 5 cars per 0.16 ms = 31,250 req/s
        "car": [
            MachineGroup(**gpu, batch=4, concurrency=2, machines=188, rate_per_machine=160.0, duration_s=0.05)
        ],
        # t = 2/0.025 = 80: ceil(0.4 * 8) = 4 persons per 0.16 ms = 25,000 req/s
        "person": [MachineGroup(**gpu, batch=2, machines=250, rate_per_machine=80.0, duration_s=0.025)],
    }
    rates = {"detector": 50_000.0, "car": 30_000.0, "person": 20_000.0}
    problem = ProblemSpec(
        name="synthetic-100k",
        slo_s=0.5,
        hardware={"gpu": {"price_per_hour": 1.0}},
        modules={
            module: {
                "rate": rates[module],
                "profile": [
                    {
                        "hardware": "gpu",
                        "batch": group.batch,
                        "concurrency": group.concurrency,
                        "duration_s": group.duration_s,
                    }
                    for group in gs
                ],
            }
            for module, gs in groups.items()
        },
        edges=[("detector", "car"), ("detector", "person")],
    )
    modules = {module: _module_plan(gs, rates[module]) for module, gs in groups.items()}
    plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=0.0, solve_ms=0.0, modules=modules)
    return problem, _costed(dispatchable(problem, plan))


def _costed(plan: Plan) -> Plan:
    gs = [group for mp in plan.modules.values() for group in mp.groups]
    cost = sum(
        group.machines * group.rate_per_machine / (group.concurrency * group.batch / group.duration_s)
        for group in gs
    )
    return plan.model_copy(
        update={"cost_per_hour": cost, "billed_per_hour": float(sum(group.machines for group in gs))}
    )


def example_plans() -> list[tuple[ProblemSpec, Plan]]:
    """Hand-made plans for the papers' examples (what the papers' tables give; no solver involved)."""
    out = []
    gpu = {"hardware": "gpu"}
    specs = {
        # Harpagon M3, 198 req/s, SLO 1.0: 6 x batch-32 (t=40) + 1 x batch-8 at 38 (t=32 -> full w/ dummy)
        "harpagon_m1.json": {
            "m1": [MachineGroup(**gpu, batch=8, machines=4, rate_per_machine=25.0, duration_s=0.32)]
        },
        "harpagon_m3.json": {
            "m3": [
                MachineGroup(**gpu, batch=32, machines=4, rate_per_machine=40.0, duration_s=0.8),
                MachineGroup(**gpu, batch=8, machines=1, rate_per_machine=32.0, duration_s=0.25),
                MachineGroup(**gpu, batch=2, machines=1, rate_per_machine=6.0, duration_s=0.1),
            ]
        },
        # Piccolo M1: 285 req/s all on batch-100 machines (docs/design.md §2: 1 + 100/285 = 1.35 s)
        "piccolo_m1.json": {
            "m1": [MachineGroup(**gpu, batch=100, machines=3, rate_per_machine=95.0, duration_s=1.0)]
        },
        "piccolo_m2m3_chain.json": {
            "a": [MachineGroup(**gpu, batch=4, machines=2, rate_per_machine=25.0, duration_s=0.16)],
            "b": [MachineGroup(**gpu, batch=4, machines=2, rate_per_machine=20.0, duration_s=0.2)],
        },
    }
    for fname, groups in specs.items():
        problem = ProblemSpec.model_validate_json((EXAMPLES / fname).read_text())
        modules = {module: _module_plan(gs, problem.modules[module].rate) for module, gs in groups.items()}
        plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=0.0, solve_ms=0.0, modules=modules)
        out.append((problem, _costed(dispatchable(problem, plan))))
    return out
