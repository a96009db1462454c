"""The hop study: plans made with the control loop's hop rule, simulated with hops drawn from measured
deliveries (``skinflint bench simulator --hop-study N``).

For each of N generated apps (:func:`planner.generate.generate_problem`, seeded; their SLOs, the papers'
model-time budgets, lengthened by one planned hop per module of the longest path) the study plans as the
control loop does once a module's deliveries are measured: the hop is the samples' p99 by
:func:`control.hops.decide_hop` (at least its 20 ms floor, rounded up to 5 ms), carried as latency only
(:func:`control.problems.adjust_profiles` with ``hop_as_latency``), the rates with the forecast's 10 %
headroom, a dispatch-aware billed solve. Each plan is then simulated at the app's own rates, Poisson
arrivals through the front's admission, with every request's hop drawn from the samples and each batch
waiting for its slowest request (:func:`planner.simulator.simulate`, ``hop_samples``). Beside it, the
same app planned with the hop billed as device time (the model before the hop was latency only:
every profile duration + the hop) gives the cost the latency-only model saves.

Not simulated: the worker's own per-batch time (grace, the part of the preparation a batch waits for),
which the deployed control loop plans on top of the hop as ``batch_overhead_s``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import track
from rich.table import Table

from bench.errors import BenchError
from bench.problems import scaled
from control.hops import HopSettings, decide_hop
from control.problems import adjust_profiles
from planner.errors import InfeasibleError
from planner.generate import generate_problem
from planner.robust import solve_dispatchable
from planner.simulator import simulate

if TYPE_CHECKING:
    from planner.models import ProblemSpec

__all__ = ["DEFAULT_HOPS", "hop_study", "load_hops", "print_hop_study", "run_hop_study"]

#: the packaged measurement: one local-stack demo run's first deliveries (its ``about`` says where)
DEFAULT_HOPS = Path(__file__).resolve().parent.parent / "data" / "hops-local-2026-11-26.json"


def load_hops(path: Path) -> tuple[list[float], str]:
    """(delays in s, where they come from) from a JSON file with ``delays_ms`` (as the packaged one)
    or a demo's ``tasks.jsonl`` (its ``delivery_s`` column). One line on a bad file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BenchError(f"cannot read hop samples {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            delays = [float(row["delivery_s"]) for row in rows if row.get("delivery_s") is not None]
            about = f"{path.name}: delivery_s of {len(rows)} tasks"
        else:
            doc = json.loads(text)
            delays = [float(ms) / 1e3 for ms in doc["delays_ms"]]
            about = str(doc.get("about", path.name))
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(
            f"{path}: not hop samples (delays_ms or a tasks.jsonl with delivery_s): {exc}"
        ) from exc
    if not delays or min(delays) < 0:
        raise BenchError(f"{path}: no hop samples, or a negative one")
    return [max(0.0, delay) for delay in delays], about


def _quantile(sorted_xs: list[float], q: float) -> float:
    return sorted_xs[min(len(sorted_xs) - 1, int(q * len(sorted_xs)))]


def _depth(problem: ProblemSpec) -> int:
    """Modules on the longest root-to-leaf path: the hops a frame's slowest path takes."""
    parents = problem.parents()
    depth: dict[str, int] = {}
    for name in problem.order():
        depth[name] = 1 + max((depth[parent] for parent in parents[name]), default=0)
    return max(depth.values())


def with_hops_in_slo(problem: ProblemSpec, hop_s: float) -> ProblemSpec:
    """``problem`` with its SLO lengthened by one planned hop per module of its longest path: the
    generator's SLOs are the papers' (model time only), an app served over queues needs its hops on top."""
    return problem.model_copy(update={"slo_s": round(problem.slo_s + _depth(problem) * hop_s, 6)})


def hop_study(
    count: int,
    duration: float,
    hops: list[float],
    *,
    headroom: float = 0.1,
    seed: int = 0,
    about: str = "",
) -> dict[str, Any]:
    """The study (module doc): per app the attainment of its admitted frames, its $/h with the hop as
    latency and as device time; totals, the apps below 99 %, and the apps neither model could plan."""
    ordered = sorted(hops)
    p99 = _quantile(ordered, 0.99)
    hop_s, _ = decide_hop(None, len(ordered), p99, HopSettings())
    apps: list[dict[str, Any]] = []
    for i in track(range(count), description="hop study", console=Console(stderr=True), transient=True):
        problem = with_hops_in_slo(generate_problem(seed + i), hop_s)
        planned = scaled(problem, 1 + headroom)
        row: dict[str, Any] = {"app": problem.name, "modules": len(problem.modules), "slo_s": problem.slo_s}
        try:
            plan = solve_dispatchable(adjust_profiles(planned, hop_s, hop_as_latency=True))
        except InfeasibleError:
            row.update(planned=False)
            apps.append(row)
            continue
        try:
            device_plan = solve_dispatchable(adjust_profiles(planned, hop_s, hop_as_latency=False))
            row["device_model_per_hour"] = device_plan.billed_per_hour
        except InfeasibleError:
            row["device_model_per_hour"] = None
        result = simulate(
            problem, plan, duration, "poisson", seed=seed + i, admission="planned", hop_samples=ordered
        )
        constant = simulate(problem, plan, duration, "poisson", seed=seed + i, admission="planned")
        folded = simulate(
            problem,
            plan,
            duration,
            "poisson",
            seed=seed + i,
            admission="planned",
            hop_samples=ordered,
            late="next",
        )
        offered = result.frames_offered
        row.update(
            planned=True,
            per_hour=plan.billed_per_hour,
            attainment=result.end_to_end.slo_attainment,
            shed=result.frames_shed / offered if offered else 0.0,
            p99_s=result.end_to_end.latency.p99_s,
            overflow_batches=sum(module.overflow_batches for module in result.modules.values()),
            # the same plan with every hop the planned one (what the plan assumes)
            constant_attainment=constant.end_to_end.slo_attainment,
            constant_overflow_batches=sum(module.overflow_batches for module in constant.modules.values()),
            # drawn hops, a late request folded into a later window of its machine instead of its own batch
            folded_attainment=folded.end_to_end.slo_attainment,
            folded_overflow_batches=sum(module.overflow_batches for module in folded.modules.values()),
        )
        apps.append(row)
    planned_rows = [row for row in apps if row["planned"]]
    both = [row for row in planned_rows if row.get("device_model_per_hour")]
    attainment = [row["attainment"] for row in planned_rows]
    return {
        "apps": count,
        "simulated_s": duration,
        "headroom": headroom,
        "seed": seed,
        "hops": {
            "about": about,
            "samples": len(ordered),
            "p50_ms": round(_quantile(ordered, 0.5) * 1e3, 1),
            "p99_ms": round(p99 * 1e3, 1),
            "max_ms": round(ordered[-1] * 1e3, 1),
            "planned_hop_s": hop_s,
        },
        "planned": len(planned_rows),
        "unplannable": count - len(planned_rows),
        "apps_below_99": sum(1 for value in attainment if value < 0.99),
        "attainment_min": round(min(attainment), 4) if attainment else None,
        "attainment_mean": round(statistics.fmean(attainment), 4) if attainment else None,
        "constant_hop": _variant(planned_rows, "constant"),
        "late_folded": _variant(planned_rows, "folded"),
        "apps_overflowing": sum(1 for row in planned_rows if row["overflow_batches"]),
        "shed_mean": round(statistics.fmean(row["shed"] for row in planned_rows), 4)
        if planned_rows
        else None,
        "per_hour": round(sum(row["per_hour"] for row in both), 2),
        "device_model_per_hour": round(sum(row["device_model_per_hour"] for row in both), 2),
        "compared_apps": len(both),
        "rows": apps,
    }


def run_hop_study(args: Any) -> int:
    """``--hop-study N`` (bench/simulator/__init__.py): the study printed; 1 when an app is below 99 %."""
    hops, about = load_hops(args.hops)
    duration = float(args.duration) if args.duration != args.default_duration else 20.0
    study = hop_study(args.hop_study, duration, hops, headroom=args.headroom, about=about)
    if args.json:
        print(json.dumps(study, indent=2))
    else:
        print_hop_study(study)
    return 0 if study["apps_below_99"] == 0 else 1


def _variant(rows: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    """The same plans simulated another way (``<prefix>_attainment``, ``<prefix>_overflow_batches``)."""
    attainment = [row[f"{prefix}_attainment"] for row in rows]
    return {
        "apps_below_99": sum(1 for value in attainment if value < 0.99),
        "attainment_min": round(min(attainment), 4) if attainment else None,
        "apps_overflowing": sum(1 for row in rows if row[f"{prefix}_overflow_batches"]),
    }


def print_hop_study(study: dict[str, Any]) -> None:
    console = Console()
    hops = study["hops"]
    console.print(
        f"hop samples: {hops['samples']} (p50 {hops['p50_ms']} ms, p99 {hops['p99_ms']} ms, max "
        f"{hops['max_ms']} ms); planned hop {hops['planned_hop_s'] * 1e3:.0f} ms. {hops['about']}"
    )
    title = f"{study['apps']} generated apps, {study['simulated_s']:g} s each, Poisson arrivals, admission"
    table = Table(title=title)
    for column in ("hops simulated", "planned", "below 99 % within SLO", "attainment min / mean",
                   "apps with overflowing windows", "shed mean"):  # fmt: skip
        table.add_column(column, justify="right")
    table.add_row(
        "drawn; a late request runs alone (the worker)",
        f"{study['planned']} of {study['apps']}",
        str(study["apps_below_99"]),
        f"{study['attainment_min']} / {study['attainment_mean']}",
        str(study["apps_overflowing"]),
        str(study["shed_mean"]),
    )
    for label, key in (
        ("drawn; a late request joins a later window", "late_folded"),
        ("the planned hop, every time", "constant_hop"),
    ):
        variant = study[key]
        table.add_row(
            label,
            f"{study['planned']} of {study['apps']}",
            str(variant["apps_below_99"]),
            f"{variant['attainment_min']} / -",
            str(variant["apps_overflowing"]),
            "-",
        )
    console.print(table)
    ratio = study["per_hour"] / study["device_model_per_hour"] if study["device_model_per_hour"] else None
    console.print(
        f"bill of the {study['compared_apps']} apps both models plan: hop as latency "
        f"${study['per_hour']:.2f}/h, hop as device time ${study['device_model_per_hour']:.2f}/h"
        + ("" if ratio is None else f" (ratio {ratio:.2f})")
    )
    worst = sorted((row for row in study["rows"] if row["planned"]), key=lambda row: row["attainment"])[:5]
    for row in worst:
        console.print(
            f"  lowest: {row['app']} ({row['modules']} modules, SLO {row['slo_s'] * 1e3:.0f} ms): "
            f"{100 * row['attainment']:.2f} % within, p99 {row['p99_s'] * 1e3:.0f} ms, "
            f"{row['overflow_batches']} overflowing windows"
        )
