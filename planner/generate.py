"""Seeded generator of planning problems shaped like the papers' five applications and random DAGs.

Profiles follow Nexus's linear batch model d(b) = beta + alpha * b per hardware, with each
hardware's speed and fixed overhead drawn around published ratios (V100 fastest, P100 and T4
slower, CPUs slow with little overhead), and a little noise so configs are not collinear.
Prices are the catalog's on-demand prices; P100 (no EC2 offering) uses a GCP-like price.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.models import ProblemSpec

__all__ = ["APP_SHAPES", "HARDWARE_POOL", "generate_problem", "generate_problems"]

# name -> (price $/h, relative speed, fixed overhead s, max concurrency)
HARDWARE_POOL: dict[str, tuple[float, float, float, int]] = {
    "v100": (3.06, 1.0, 0.004, 2),
    "p100": (1.46, 0.62, 0.005, 2),
    "t4": (0.526, 0.38, 0.004, 2),
    "c6i.2xlarge": (0.34, 0.05, 0.0005, 1),
    "c6i.xlarge": (0.17, 0.027, 0.0005, 1),
}

# app -> (edges with fan-out, per-module work in V100 ms per request, cpu_only modules)
APP_SHAPES: dict[str, tuple[list[tuple[str, str, float]], dict[str, float], set[str]]] = {
    "traffic": (
        [("detector", "vehicle", 1.5), ("detector", "person", 0.6)],
        {"detector": 2.2, "vehicle": 0.6, "person": 0.5},
        set(),
    ),
    "face": ([("detector", "landmark", 1.2)], {"detector": 1.8, "landmark": 1.1}, set()),
    "pose": ([("detector", "pose", 1.0)], {"detector": 2.0, "pose": 2.6}, set()),
    "caption": ([("encoder", "decoder", 1.0)], {"encoder": 1.4, "decoder": 0.9}, set()),
    "actdet": (
        [("detector", "tracker", 1.0), ("tracker", "action", 0.8)],
        {"detector": 2.2, "tracker": 0.05, "action": 1.6},
        {"tracker"},
    ),
}

BATCHES = [1, 2, 4, 8, 16, 32]


def _profile(
    rng: np.random.Generator, work_ms: float, hardware: list[str], cpu_only: bool
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for hw in hardware:
        _, speed, overhead, max_conc = HARDWARE_POOL[hw]
        is_cpu = hw.startswith("c6i")
        if cpu_only and not is_cpu:
            continue
        alpha = work_ms / 1000 / speed * rng.uniform(0.8, 1.25)
        if cpu_only:
            alpha = work_ms / 1000 * rng.uniform(0.8, 1.25) * (0.5 if hw == "c6i.2xlarge" else 1.0)
        beta = overhead * rng.uniform(0.7, 1.5) + (0 if is_cpu else alpha * rng.uniform(2, 6))
        batches = BATCHES[:4] if is_cpu else BATCHES
        for b in batches:
            for c in range(1, max_conc + 1):
                # concurrency shares the device: each copy slows down, total throughput gains a bit
                slow = 1.0 if c == 1 else rng.uniform(1.45, 1.9)
                d = (beta + alpha * b * rng.uniform(0.97, 1.03)) * slow
                out.append({"hardware": hw, "batch": b, "concurrency": c, "duration_s": round(d, 6)})
    return out


def generate_problem(seed: int, kind: str | None = None) -> ProblemSpec:
    """One problem. ``kind`` is an app shape name, ``random`` for a random DAG, or None to draw."""
    rng = np.random.default_rng(seed)
    kinds = [*APP_SHAPES, "random"]
    kind = kind or kinds[int(rng.integers(len(kinds)))]
    n_hw = int(rng.integers(2, 5))
    gpus = [h for h in HARDWARE_POOL if not h.startswith("c6i")]
    hw = list(rng.choice(gpus, size=min(n_hw - 1, len(gpus)), replace=False))
    hw.append(str(rng.choice(["c6i.xlarge", "c6i.2xlarge"])))
    if kind == "random":
        n = int(rng.integers(1, 5))
        names = [f"m{i}" for i in range(n)]
        edges = []
        for j in range(1, n):
            parents = rng.choice(j, size=int(rng.integers(1, min(j, 2) + 1)), replace=False)
            edges += [(f"m{int(p)}", f"m{j}", float(rng.uniform(0.3, 2.0))) for p in parents]
        work = {m: float(rng.uniform(0.3, 3.0)) for m in names}
        cpu_only: set[str] = set()
    else:
        edges, work, cpu_only = APP_SHAPES[kind]
        names = list(work)
    root_rate = float(rng.uniform(15, 400))
    rates = dict.fromkeys(names, 0.0)
    has_parent = {d for _, d, _ in edges}
    for m in names:
        if m not in has_parent:
            rates[m] = root_rate
    for src, dst, fan in edges:  # edges are listed parents-first
        rates[dst] += rates[src] * fan
    modules = {
        m: {"rate": round(rates[m], 3), "profile": _profile(rng, work[m], hw, m in cpu_only)} for m in names
    }
    problem = ProblemSpec.model_validate(
        {
            "name": f"{kind}-{seed}",
            "slo_s": 1.0,
            "hardware": {h: {"price_per_hour": HARDWARE_POOL[h][0]} for h in hw},
            "modules": modules,
            "edges": [(s, d) for s, d, _ in edges],
        }
    )
    # SLO between 1.3x and 4x the fastest possible path (every module at its smallest duration)
    fastest = max(
        sum(min(e.duration_s for e in problem.modules[m].profile) for m in p) for p in problem.paths()
    )
    slo = round(fastest * float(rng.uniform(1.3, 4.0)) + float(rng.uniform(0.0, 0.05)), 4)
    return problem.model_copy(update={"slo_s": slo})


def generate_problems(count: int, seed: int = 0) -> list[ProblemSpec]:
    return [generate_problem(seed * 100_003 + i) for i in range(count)]
