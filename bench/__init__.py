"""Benchmarks: each prints figures and writes a dated page under docs/results/ (``skinflint bench ...``).

Every benchmark is a module (or package) of this one with ``add_arguments(parser)``, its flags defined
once, and ``run_command(args) -> int``. :data:`BENCHES` names them for the CLI, which imports a benchmark's
module only when that benchmark is asked for (they import the planner, numpy and pydantic at the top).
:mod:`bench.results` writes the dated page of every run.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["BENCHES", "Benchmark"]


class Benchmark(NamedTuple):
    """One benchmark: ``skinflint bench <name>`` runs ``<module>.run_command``."""

    name: str
    module: str
    summary: str


BENCHES: tuple[Benchmark, ...] = (
    Benchmark(
        "planner", "bench.planner", "every policy on generated problems, normalised to the exact optimum"
    ),
    Benchmark(
        "fleet",
        "bench.fleet",
        "plan + pack epochs of generated multi-app fleets: cost, time, verification, steady load",
    ),
    Benchmark(
        "diurnal",
        "bench.diurnal",
        "a day of diurnal load over many apps: epoch re-planning vs static peak provisioning",
    ),
    Benchmark(
        "simulator",
        "bench.simulator",
        "the dispatch schedule + simulator: a 100k req/s plan, the papers' examples, generated plans, "
        "arrival and reserve studies",
    ),
    Benchmark(
        "dispatch",
        "bench.dispatch",
        "the front's per-frame dispatch decision latency (route + task message), in process",
    ),
    Benchmark(
        "tco",
        "bench.tco",
        "all-in $ per million frames of every demo app: today's data plane, the batched one, Triton+ALB, "
        "SageMaker",
    ),
    Benchmark(
        "abuse",
        "bench.abuse",
        "hostile traffic against a local stack: bad bodies, bombs, batches, long polls, a one-key flood",
    ),
    Benchmark(
        "profiles",
        "bench.profiles",
        "the profiler: host noise floor, repeated profiling spread, linear fits, a full models build",
    ),
    Benchmark(
        "gpu-derive",
        "bench.gpu_derive",
        "leave-one-out of the per-operator roofline derivation on the H100 figures and this host's CPU",
    ),
    Benchmark(
        "gpu-check",
        "bench.gpu_check",
        "on a CUDA machine: measure the demo models, write device specs with anchors, derived vs measured",
    ),
)
