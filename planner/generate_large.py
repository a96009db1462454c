"""Seeded generator of application-sized planning problems: 5-10 modules, chains, out-trees and DAGs
with joins (issue #29's shape).

Each problem draws:

- a DAG of 5-10 modules with one root (the camera stream): a ``chain``; an ``out-tree`` (each module
  hangs off one earlier module, e.g. detector -> tracker -> action, detector -> re-id); or a ``dag``:
  an out-tree plus one to three extra edges, so some module has several parents (branches that join
  back, e.g. OCR and captioning feeding one aggregator);
- 3-6 hardware types among p100, v100, t4, c6i.large, c6i.xlarge and c6i.2xlarge, at the catalog's
  on-demand prices (``profiles/hardware.json``; the planner may not import the profiles package, a unit
  test checks the copy below against it), at least one GPU and one CPU type;
- per module a profile in Nexus's linear batch model d(b) = beta + alpha b per hardware (speed and fixed
  overhead drawn around published ratios, a little noise so configurations are not collinear), batches
  1-64 on a GPU and 1-8 on a CPU, and on some GPUs concurrency 2 or 3 (each copy slower, the machine's
  throughput a little higher); about one module in seven runs on CPUs only (a tracker);
- request rates from 5 to 2,000 req/s (a root rate, fan-outs along the edges, a join receiving the
  sum of its parents' streams; clipped to that range);
- an SLO from 0.1 to 2 s, at least 1.3x the fastest path (the work is scaled down when the drawn SLO is
  too tight for it), so every problem is feasible.

The same seed gives the same problem (numpy's PCG64); nothing is read from disk.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from planner.models import ProblemSpec

__all__ = ["CATALOG", "LARGE_SHAPES", "generate_large_problem", "generate_large_problems"]

Shape = Literal["chain", "out-tree", "dag"]
LARGE_SHAPES: tuple[Shape, ...] = ("chain", "out-tree", "dag")

# name -> (price $/h as in profiles/hardware.json, relative speed, fixed overhead s, largest concurrency)
CATALOG: dict[str, tuple[float, float, float, int]] = {
    "v100": (3.06, 1.0, 0.004, 3),
    "p100": (1.46, 0.62, 0.005, 2),
    "t4": (0.526, 0.38, 0.004, 3),
    "c6i.2xlarge": (0.34, 0.05, 0.0005, 1),
    "c6i.xlarge": (0.17, 0.027, 0.0005, 1),
    "c6i.large": (0.085, 0.0135, 0.0005, 1),
}
GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64)
CPU_BATCHES = (1, 2, 4, 8)
MIN_RATE, MAX_RATE = 5.0, 2000.0
MIN_SLO, MAX_SLO = 0.1, 2.0


def _edges(rng: np.random.Generator, n: int, shape: Shape) -> list[tuple[int, int]]:
    if shape == "chain":
        return [(j - 1, j) for j in range(1, n)]
    # out-tree: each module hangs off an earlier one (recent ones likelier: pipelines are deep)
    edges = []
    for j in range(1, n):
        weights = np.arange(1, j + 1, dtype=float)
        edges.append((int(rng.choice(j, p=weights / weights.sum())), j))
    if shape == "dag":
        extra = int(rng.integers(1, 4))
        for _ in range(50):
            if extra == 0:
                break
            j = int(rng.integers(2, n))
            i = int(rng.integers(0, j))
            if (i, j) not in edges:
                edges.append((i, j))
                extra -= 1
    return sorted(edges, key=lambda e: (e[1], e[0]))


def _profile(
    rng: np.random.Generator, work_ms: float, hardware: list[str], cpu_only: bool, concurrent: set[str]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for hw in hardware:
        _, speed, overhead, max_conc = CATALOG[hw]
        is_cpu = hw.startswith("c6i")
        if cpu_only and not is_cpu:
            continue
        alpha = work_ms / 1000 / speed * rng.uniform(0.8, 1.25)
        if cpu_only:  # light CPU work (a tracker): per request ms on the smallest CPU, halved per size
            alpha = work_ms / 1000 * rng.uniform(0.8, 1.25) * 0.0135 / speed
        beta = overhead * rng.uniform(0.7, 1.5) + (0 if is_cpu else alpha * rng.uniform(2, 6))
        conc = max_conc if hw in concurrent else 1
        for b in CPU_BATCHES if is_cpu else GPU_BATCHES:
            for c in range(1, conc + 1):
                slow = 1.0 if c == 1 else rng.uniform(1.45, 1.9) ** (c - 1) * 0.9 ** (c - 2)
                d = (beta + alpha * b * rng.uniform(0.97, 1.03)) * slow
                out.append({"hardware": hw, "batch": b, "concurrency": c, "duration_s": round(d, 6)})
    return out


def generate_large_problem(seed: int, modules: int | None = None, shape: Shape | None = None) -> ProblemSpec:
    """One problem of ``modules`` modules (None: drawn from 5-10) and DAG ``shape`` (None: drawn)."""
    rng = np.random.default_rng([29, seed])
    n = modules if modules is not None else int(rng.integers(5, 11))
    shape = shape if shape is not None else LARGE_SHAPES[int(rng.integers(len(LARGE_SHAPES)))]
    if n < 1 or (shape == "dag" and n < 3):
        raise ValueError(f"a {shape} needs more modules than {n}")
    gpus = [h for h in CATALOG if not h.startswith("c6i")]
    cpus = [h for h in CATALOG if h.startswith("c6i")]
    k = int(rng.integers(3, 7))
    n_gpu = int(rng.integers(max(1, k - len(cpus)), min(len(gpus), k - 1) + 1))
    hardware = sorted(
        [str(h) for h in rng.choice(gpus, n_gpu, replace=False)]
        + [str(h) for h in rng.choice(cpus, k - n_gpu, replace=False)]
    )
    concurrent = {h for h in hardware if CATALOG[h][3] > 1 and rng.random() < 0.5}
    names = [f"m{i}" for i in range(n)]
    edges = _edges(rng, n, shape)
    cpu_only = {j for j in range(1, n) if rng.random() < 0.15}
    work = [float(rng.uniform(0.3, 3.0)) for _ in range(n)]
    rates = [0.0] * n
    rates[0] = float(math.exp(rng.uniform(math.log(5), math.log(500))))
    for i, j in edges:  # sorted by child: every parent's rate is final before its children read it
        rates[j] += rates[i] * float(rng.uniform(0.3, 3.0))
    rates = [round(min(MAX_RATE, max(MIN_RATE, r)), 3) for r in rates]
    slo = float(math.exp(rng.uniform(math.log(MIN_SLO), math.log(MAX_SLO))))
    margin = float(rng.uniform(1.3, 4.0))
    while True:
        profiles = [_profile(rng, work[j], hardware, j in cpu_only, concurrent) for j in range(n)]
        floors = [min(e["duration_s"] for e in p) for p in profiles]
        fastest = _longest_path(floors, edges)
        if fastest * margin <= slo:
            break
        scale = slo / (fastest * margin)
        work = [w * scale for w in work]  # faster models (smaller inputs): the SLO stays as drawn
    problem = {
        "name": f"large-{shape}-{n}-{seed}",
        "slo_s": round(slo, 4),
        "hardware": {h: {"price_per_hour": CATALOG[h][0]} for h in hardware},
        "modules": {names[j]: {"rate": rates[j], "profile": profiles[j]} for j in range(n)},
        "edges": [(names[i], names[j]) for i, j in edges],
    }
    return ProblemSpec.model_validate(problem)


def _longest_path(weights: list[float], edges: list[tuple[int, int]]) -> float:
    """Longest root-to-leaf sum of ``weights`` (edges sorted by child: a topological sweep)."""
    best = list(weights)
    for i, j in sorted(edges, key=lambda e: e[1]):
        best[j] = max(best[j], best[i] + weights[j])
    return max(best)


def generate_large_problems(count: int, seed: int = 0) -> list[ProblemSpec]:
    """``count`` problems, module counts cycling through 5-10 and shapes through chain, out-tree and dag
    (dags twice as often: joins are the case the suite is about)."""
    shapes: list[Shape] = ["chain", "out-tree", "dag", "dag"]
    return [
        generate_large_problem(seed * 100_003 + i, modules=5 + i % 6, shape=shapes[(i // 6) % len(shapes)])
        for i in range(count)
    ]
