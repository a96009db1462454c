"""Diurnal scale scenario: a day of load over many apps, epoch re-planning against static peak provisioning.

Builds the apps from the packaged demo applications (real DAGs and profiles, GPU classes derived), runs
:func:`bench.scenario.run_scenario` and prints, measured at run time (nothing is hard-coded):

- per strategy (adaptive at the chosen headroom, static peak provisioning, the oracle): billed USD over the
  day, against static, occupancy USD, peak instances, scale changes, frames shed, frames within the SLO;
- the headroom sweep: adaptive and static cost, saving, SLO attainment and shed fraction per headroom;
- wall time, distinct solves and simulations, load average.

PNG plots (``--plots DIR``): ``diurnal_rate_cost.png`` (rate and cost over the day), ``diurnal_slo.png``
(SLO attainment per epoch) and ``diurnal_sweep.png`` (saving and attainment against headroom).
docs/scale.md has the method and the figures.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.errors import OptionError, ScenarioError
from bench.options import positive_int
from bench.results import Recording, add_results_arguments, record
from bench.scenario import (
    AppTemplate,
    LoadConfig,
    PolicyConfig,
    ScenarioReport,
    SimCache,
    SimOutcome,
    SimTask,
    SolveCache,
    make_load,
    run_scenario,
    simulate_task,
    total_steps,
)
from planner.errors import PlannerError
from profiles.errors import ProfilesError
from profiles.hardware import select
from profiles.store import PACKAGE_ROOT, LocalStore, cache_dir, default_store

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from bench.scenario import DayLoad, StrategyResult

DEFAULT_HEADROOMS = (0.05, 0.1, 0.2)
PLOTS = ("diurnal_rate_cost.png", "diurnal_slo.png", "diurnal_sweep.png")


#: Where the demo applications' profiles come from: ``packaged`` (the profiles committed with the
#: package, with their measurement's provenance: the same figures on every machine) or ``store`` (the
#: build cache of ``skinflint models build`` / ``skinflint demo`` over them: profiles measured on this
#: host, which move with its load at the time).
PROFILE_SOURCES = ("packaged", "store")


def _store(profiles: str) -> Any:
    if profiles not in PROFILE_SOURCES:
        raise OptionError(f"profiles must be one of {', '.join(PROFILE_SOURCES)}, got {profiles!r}")
    return LocalStore(PACKAGE_ROOT) if profiles == "packaged" else default_store()


def demo_templates(profiles: str = "packaged") -> dict[str, AppTemplate]:
    """One template per packaged demo application: its DAG, its models' profiles (from ``profiles``:
    :data:`PROFILE_SOURCES`) and the whole catalog."""
    try:
        store = _store(profiles)
        catalog = select(store.load_catalog(), None)
        out: dict[str, AppTemplate] = {}
        for name in store.list_apps():
            spec = store.load_app(name)
            models = {module.model: store.load_profile(module.model) for module in spec.modules.values()}
            out[name] = AppTemplate(name, spec, models, catalog)
    except ProfilesError as exc:
        raise ScenarioError(f"cannot load the demo applications: {exc}") from exc
    if not out:
        raise ScenarioError("no demo applications in the profile store")
    return out


def profile_provenance(profiles: str) -> dict[str, Any]:
    """Where each demo model's profile came from: the store read, and per model the layer that held it
    (``packaged`` or ``build cache``) with its measurement's date, host load and source (measured or
    derived), from its first entry."""
    store = _store(profiles)
    cached = set(LocalStore(cache_dir()).list_models()) if profiles == "store" else set()
    models: dict[str, Any] = {}
    for app in store.list_apps():
        for mod in store.load_app(app).modules.values():
            if mod.model in models:
                continue
            first = (store.load_profile_dicts(mod.model) or [{}])[0]
            models[mod.model] = {
                "layer": "build cache" if mod.model in cached else "packaged",
                **{key: first[key] for key in ("source", "date", "host_load_1m") if key in first},
            }
    return {"profiles": profiles, "store": store.describe(), "models": dict(sorted(models.items()))}


def run(
    load_cfg: LoadConfig,
    policy: PolicyConfig,
    headrooms: Sequence[float],
    *,
    target: float = 0.99,
    oracle: bool = True,
    progress: bool = True,
    workers: int = 2,
    profiles: str = "packaged",
) -> tuple[ScenarioReport, dict[str, Any]]:
    """The scenario and the run's own figures (wall time, load average, caches, the profiles' provenance).
    ``workers`` processes run the simulations of an epoch in parallel (1: all in this process);
    ``profiles`` picks the demo models' profiles (:data:`PROFILE_SOURCES`)."""
    templates = demo_templates(profiles)
    load = make_load(load_cfg, sorted(templates))
    started, t0 = time.perf_counter(), os.times()
    if workers <= 1:
        report = _run(load, templates, policy, headrooms, target, oracle, progress, SimCache())
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:

            def runner(tasks: list[SimTask]) -> list[SimOutcome]:
                return list(pool.map(simulate_task, tasks, chunksize=1))

            report = _run(load, templates, policy, headrooms, target, oracle, progress, SimCache(runner))
    t1 = os.times()
    host = {
        "wall_s": time.perf_counter() - started,
        "cpu_s": (t1.user + t1.system) - (t0.user + t0.system),
        "workers_cpu_s": (t1.children_user + t1.children_system) - (t0.children_user + t0.children_system),
        "workers": workers,
        "cpus": os.cpu_count(),
        "load_avg": list(os.getloadavg()),
        "profiles": profile_provenance(profiles),
    }
    return report, host


def _run(  # noqa: PLR0913 -- the scenario's settings, passed through
    load: DayLoad,
    templates: dict[str, AppTemplate],
    policy: PolicyConfig,
    headrooms: Sequence[float],
    target: float,
    oracle: bool,
    progress: bool,
    sims: SimCache,
) -> ScenarioReport:
    cache = SolveCache(policy.policy, policy.solver)
    # the bar goes to stderr: stdout holds the figures (and the results page copies it)
    with Progress(console=Console(stderr=True), disable=not progress, transient=True) as bar:
        task = bar.add_task("diurnal day", total=total_steps(load, headrooms, oracle))

        def step(label: str) -> None:
            bar.update(task, advance=1, description=label)

        return run_scenario(
            load,
            templates,
            policy,
            headrooms=headrooms,
            target=target,
            oracle=oracle,
            cache=cache,
            sims=sims,
            progress=step,
        )


# --------------------------------------------------------------------------- output


def _row(strategy: StrategyResult, static_usd: float) -> list[str]:
    vs = f"{100 * (strategy.billed_usd / static_usd - 1):+.1f} %" if static_usd > 0 else "-"
    shed = 100 * strategy.shed / strategy.offered if strategy.offered else 0.0
    within = f"{100 * strategy.slo_attainment:.3f} %" if strategy.simulated else "not simulated"
    return [
        strategy.name,
        f"{strategy.headroom:g}",
        f"{strategy.billed_usd:,.0f}",
        vs,
        f"{strategy.occupancy_usd:,.0f}",
        str(strategy.peak_instances),
        str(strategy.scale_changes),
        f"{strategy.launched}/{strategy.terminated}",
        f"{shed:.3f} %",
        within,
    ]


def render(report: ScenarioReport, host: dict[str, Any], plots: list[str]) -> None:
    console = Console(width=max(Console().width, 130))
    ld, pol = report.load, report.policy
    table = Table(
        title=f"A day at up to {ld.peak_rps:,.0f} frames/s over {ld.apps} apps, "
        f"{ld.epochs} epochs of {ld.epoch_minutes} min (billed USD over 24 h)"
    )
    for col in ("strategy", "headroom", "billed $", "vs static", "occupancy $", "peak inst.",
                "scale changes", "launch/stop", "shed", "within SLO"):  # fmt: skip
        table.add_column(col, justify="left" if col == "strategy" else "right")
    static_usd = report.static.billed_usd
    for strategy in (report.adaptive, report.static, report.oracle):
        if strategy is not None:
            table.add_row(*_row(strategy, static_usd))
    console.print(table)
    sweep = Table(title="Headroom sweep (adaptive re-planning against static peak provisioning)")
    for col in ("headroom", "adaptive $", "static $", "saving", "within SLO", "shed", "scale changes"):
        sweep.add_column(col, justify="right")
    for point in report.sweep:
        sweep.add_row(
            f"{point.headroom:g}",
            f"{point.adaptive_usd:,.0f}",
            f"{point.static_usd:,.0f}",
            f"{100 * point.saving:.1f} %",
            f"{100 * point.slo_attainment:.3f} %",
            f"{100 * point.shed_fraction:.3f} %",
            str(point.scale_changes),
        )
    console.print(sweep)
    verdict = "met" if report.target_met else "NOT met"
    console.print(
        f"Target: >= {100 * report.target_attainment:g} % of frames within the SLO, {verdict}; "
        f"chosen headroom {pol.headroom:g}: adaptive ${report.adaptive.billed_usd:,.0f} "
        f"vs static ${static_usd:,.0f} "
        f"({100 * report.saving:.1f} % saved)."
    )
    burst = report.burst
    if burst:
        start = int(str(burst["start_minute"]))
        console.print(
            f"Burst: x{burst['factor']} on {', '.join(map(str, burst['apps']))} "  # type: ignore[call-overload]
            f"from {start // 60:02d}:{start % 60:02d} for {burst['minutes']} min."
        )
    load = ", ".join(f"{load:.1f}" for load in host["load_avg"])
    console.print(
        f"Simulated {pol.sample_s:g} s per level ({pol.arrivals} arrivals; median and busiest minute of "
        f"each app-epoch on a {pol.sim_grid:g} grid of capacity); "
        f"{report.solves} solves ({report.solve_cache_hits} reused), {report.simulations} simulations "
        f"({report.simulation_cache_hits} reused); {host['wall_s']:.0f} s wall, "
        f"{host['cpu_s'] + host['workers_cpu_s']:.0f} s CPU, "
        f"{host['workers']} simulation worker(s), load avg {load}."
    )
    prov = host["profiles"]
    models = "; ".join(
        f"{model} {source['layer']}"
        + (
            f" ({source['source']} {source['date']}, load {source['host_load_1m']})"
            if "date" in source
            else ""
        )
        for model, source in prov["models"].items()
        if "host_load_1m" in source
    )
    console.print(
        f"Profiles: {prov['profiles']} ({prov['store']}), solver {pol.solver}; "
        f"GPU classes derived from the profiles, not measured on a GPU. Measured: {models}."
    )
    for path in plots:
        console.print(f"plot: {path}")


def plot(report: ScenarioReport, out_dir: str) -> list[str]:
    """Write the three PNGs into ``out_dir``; returns their paths."""
    import matplotlib  # optional and slow to import: only when plots are asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OptionError(f"cannot create the plot directory {out_dir}: {exc}") from exc
    paths = [str(out / name) for name in PLOTS]
    _plot_rate_cost(plt, report, paths[0])
    _plot_slo(plt, report, paths[1])
    _plot_sweep(plt, report, paths[2])
    return paths


def _steps(strategy: StrategyResult, key: str) -> tuple[list[float], list[float]]:
    xs = [epoch.start_h for epoch in strategy.epochs]
    ys = [float(getattr(epoch, key)) for epoch in strategy.epochs]
    return [*xs, 24.0], [*ys, ys[-1]]


def _plot_rate_cost(plt: Any, report: ScenarioReport, path: str) -> None:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    minutes = [i / 60 for i in range(len(report.minute_total_rps))]
    top.plot(
        minutes,
        [rps / 1000 for rps in report.minute_total_rps],
        lw=0.7,
        color="0.4",
        label="offered (per minute)",
    )
    for strategy, color in ((report.adaptive, "C0"), (report.static, "C3")):
        xs, ys = _steps(strategy, "capacity_rps")
        top.step(
            xs,
            [capacity / 1000 for capacity in ys],
            where="post",
            color=color,
            label=f"{strategy.name} capacity",
        )
    top.set_ylabel("frames/s (thousands)")
    top.legend(loc="upper left", fontsize=8)
    top.grid(alpha=0.3)
    top.set_title(
        f"{report.load.apps} apps, peak {report.load.peak_rps:,.0f} frames/s, "
        f"headroom {report.policy.headroom:g}"
    )
    costed = [(report.adaptive, "C0"), (report.static, "C3")]
    if report.oracle is not None:
        costed.append((report.oracle, "C2"))
    for strategy, color in costed:
        xs, ys = _steps(strategy, "billed_per_hour")
        bottom.step(
            xs, ys, where="post", color=color, label=f"{strategy.name}: ${strategy.billed_usd:,.0f}/day"
        )
    xs, ys = _steps(report.adaptive, "occupancy_per_hour")
    bottom.step(xs, ys, where="post", color="C0", ls=":", label="adaptive occupancy (lower bound)")
    bottom.set_ylabel("billed USD per hour")
    bottom.set_xlabel("hour of day")
    bottom.set_xlim(0, 24)
    bottom.set_xticks(range(0, 25, 3))
    bottom.legend(loc="upper left", fontsize=8)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_slo(plt: Any, report: ScenarioReport, path: str) -> None:
    fig, ax = plt.subplots(figsize=(11, 4))
    for strategy, color in ((report.adaptive, "C0"), (report.static, "C3")):
        if not strategy.simulated:
            continue
        xs, ys = _steps(strategy, "slo_attainment")
        ax.step(
            xs,
            [100 * value for value in ys],
            where="post",
            color=color,
            label=f"{strategy.name}: {100 * strategy.slo_attainment:.2f} % of the day",
        )
    xs, ys = _steps(report.adaptive, "shed")
    offered = _steps(report.adaptive, "offered")[1]
    kept = [100 * (1 - shed / rate) if rate else 100 for shed, rate in zip(ys, offered, strict=True)]
    ax.step(xs, kept, where="post", color="C0", ls=":", label="adaptive: 100 % - shed")
    ax.axhline(100 * report.target_attainment, color="k", lw=0.8, ls="--", label="target")
    ax.set_ylabel("frames within the SLO (%)")
    ax.set_xlabel("hour of day")
    ax.set_xlim(0, 24)
    ax.set_xticks(range(0, 25, 3))
    low = min(*(epoch.slo_attainment for epoch in report.adaptive.epochs), report.target_attainment)
    ax.set_ylim(max(0.0, 100 * low - 2), 100.5)
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title("SLO attainment per epoch (simulated; shed frames count as misses)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_sweep(plt: Any, report: ScenarioReport, path: str) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    hs = [point.headroom for point in report.sweep]
    ax.plot(hs, [100 * point.saving for point in report.sweep], "o-", color="C0", label="saving vs static")
    ax.set_xlabel("forecast headroom")
    ax.set_ylabel("saving against static peak provisioning (%)", color="C0")
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    twin.plot(
        hs, [100 * point.slo_attainment for point in report.sweep], "s--", color="C3", label="within SLO"
    )
    twin.axhline(100 * report.target_attainment, color="C3", lw=0.8, ls=":")
    twin.set_ylabel("frames within the SLO (%)", color="C3")
    ax.set_title(f"Headroom sweep (chosen: {report.policy.headroom:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(
    load_cfg: LoadConfig,
    policy: PolicyConfig,
    headrooms: Sequence[float],
    *,
    as_json: bool = False,
    plots_dir: str | None = None,
    target: float = 0.99,
    oracle: bool = True,
    workers: int = 2,
    profiles: str = "packaged",
    page: Recording | None = None,
) -> int:
    try:
        report, host = run(
            load_cfg,
            policy,
            headrooms,
            target=target,
            oracle=oracle,
            progress=not as_json,
            workers=workers,
            profiles=profiles,
        )
    except PlannerError as exc:
        raise ScenarioError(str(exc).splitlines()[0]) from exc
    plots = plot(report, plots_dir) if plots_dir else []
    if page is not None:
        page.plots.extend(plots)
    if as_json:
        doc = report.model_dump(mode="json")
        doc["host"] = host
        doc["plots"] = plots
        print(json.dumps(doc, indent=1))
    else:
        render(report, host, plots)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Simulate a day of diurnal load (night trough, morning ramp, noise, a flash crowd) over many apps "
        "built from the demo applications, re-planned every epoch from forecasts of past epochs, and "
        "compare billed cost and SLO attainment with static peak provisioning (docs/scale.md)."
    )
    parser.add_argument("--apps", type=positive_int, default=24, help="apps (default 24)")
    parser.add_argument(
        "--peak", type=float, default=100_000.0, help="busiest minute, frames/s (default 100000)"
    )
    parser.add_argument(
        "--epochs", type=positive_int, default=96, help="epochs per day, dividing 1440 (default 96)"
    )
    parser.add_argument("--seed", type=int, default=0, help="load seed (default 0)")
    parser.add_argument(
        "--headroom",
        default="0.05,0.1,0.2",
        help="forecast headrooms to sweep, comma-separated; the smallest meeting the target is reported "
        "(default 0.05,0.1,0.2)",
    )
    parser.add_argument(
        "--target", type=float, default=0.99, help="fraction of frames within the SLO (default 0.99)"
    )
    parser.add_argument(
        "--sample-s",
        type=float,
        default=2.0,
        help="simulated seconds per load level, two levels per app and epoch (default 2)",
    )
    parser.add_argument(
        "--arrivals",
        choices=("uniform", "poisson", "bursty"),
        default="uniform",
        help="arrival process of the simulated samples (default uniform)",
    )
    parser.add_argument(
        "--solver",
        choices=("plain", "dispatchable"),
        default="dispatchable",
        help="planner.robust.solve_dispatchable (the default: what the control loop runs) or planner.solve "
        "(Theorem-1 plans, not realised by the dispatch)",
    )
    parser.add_argument(
        "--profiles",
        choices=PROFILE_SOURCES,
        default="packaged",
        help="the demo models' profiles: packaged (the default: the committed measurements, the same "
        "figures on every machine) or store (the build cache of skinflint models build / demo over them: "
        "this host's measurements)",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=2, help="processes running simulations (default 2)"
    )
    parser.add_argument("--no-oracle", action="store_true", help="skip the perfect-foresight oracle")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--plots", metavar="DIR", default=None, help="write the PNG plots into DIR")
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    try:
        headrooms = [float(value) for value in args.headroom.split(",") if value.strip()]
    except ValueError:
        raise OptionError(f"--headroom must be comma-separated numbers, got {args.headroom!r}") from None
    if not headrooms or any(not 0 <= headroom <= 5 for headroom in headrooms):
        raise OptionError(f"--headroom must list fractions in [0, 5], got {args.headroom!r}")
    if not 0 < args.target <= 1:
        raise OptionError(f"--target must be a fraction in (0, 1], got {args.target}")
    try:
        load = LoadConfig(apps=args.apps, peak_rps=args.peak, epochs=args.epochs, seed=args.seed)
        policy = PolicyConfig(
            headroom=headrooms[0], sample_s=args.sample_s, arrivals=args.arrivals, solver=args.solver
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        raise OptionError(f"bad {where}: {error['msg']}") from None

    def body(page: Recording) -> int:
        return main(
            load,
            policy,
            headrooms,
            as_json=args.json,
            plots_dir=args.plots,
            target=args.target,
            oracle=not args.no_oracle,
            workers=args.workers,
            profiles=args.profiles,
            page=page,
        )

    return record("diurnal", args, body)
