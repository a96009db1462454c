"""The fleet benchmark's output: its tables (:func:`render`) and its plot (:func:`plot`)."""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.fleet.changes import CHANGE_NAMES
from bench.fleet.common import TARGET_EPOCH_S, TARGET_RATIO


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib  # optional and slow to import: only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    sizes = sorted(result["by_size"])
    for key, label, marker in [
        ("dedicated_ratio", "dedicated (solver's plans)", "s"),
        ("ratio", "packed fleet (this work)", "o"),
        ("latency_free_ratio", "latency-free packing (no SLO check)", "^"),
    ]:
        xs = [fleet["size"] for fleet in result["fleets"]]
        ys = [fleet[key] for fleet in result["fleets"]]
        ax.scatter(xs, ys, marker=marker, alpha=0.5, label=label)
        ax.plot(
            sizes,
            [
                statistics.median(fleet[key] for fleet in result["fleets"] if fleet["size"] == size)
                for size in sizes
            ],
        )
    ax.axhline(TARGET_RATIO, color="k", ls="--", lw=1, label=f"target {TARGET_RATIO}")
    ax.set_xscale("log")
    ax.set_xlabel("apps in the fleet")
    ax.set_ylabel("billed $/h / occupancy lower bound")
    ax.set_title(f"cost per fleet size ({result['seeds']} seeds each)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    rows = result["steady"]["_rows"]
    for hw in sorted({hw for row in rows for hw in row["desired"]}):
        line = ax2.plot(
            [row["epoch"] for row in rows], [row["desired"].get(hw, 0) for row in rows], label=f"{hw} desired"
        )
        ax2.plot(
            [row["epoch"] for row in rows],
            [row["target"].get(hw, 0) for row in rows],
            ls=":",
            color=line[0].get_color(),
        )
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("instances (dotted: packed target)")
    ax2.set_title(f"steady load +-{result['steady']['noise']:.0%}: desired capacity")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ms(summary: dict[str, float]) -> str:
    return f"{summary['median_ms']:.0f} ({summary['min_ms']:.0f}-{summary['max_ms']:.0f})"


def render(result: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 120))
    table = Table(
        title=f"billed cost after packing / occupancy lower bound (median, min-max over seeds; "
        f"{result['solver']} solver)"
    )
    cols = ["apps", "fleets", "packed", "min-max", "FIFO only", "dedicated", "latency-free", "shared inst."]
    for col in [*cols, "aligned inst.", "errors"]:
        table.add_column(col, justify="right")
    for size, figures in result["by_size"].items():
        table.add_row(
            str(size),
            str(figures["fleets"]),
            f"{figures['ratio_median']:.3f}",
            f"{figures['ratio_min']:.3f}-{figures['ratio_max']:.3f}",
            f"{figures['fifo_only_ratio_median']:.3f}",
            f"{figures['dedicated_ratio_median']:.3f}",
            f"{figures['latency_free_ratio_median']:.3f}",
            f"{figures['shared_instances_median']:g}",
            f"{figures['aligned_instances_median']:g}",
            str(figures["errors"]),
        )
    console.print(table)
    table = Table(
        title="where the bill goes, per $/h of the occupancy lower bound (median over seeds): the apps' "
        "requests on the plans' machines, the plans' occupancy (requests + capacity held for the "
        "guarantees), the bill after packing"
    )
    for col in ["apps", "requests", "plans' occupancy", "billed", "billed / plans' occupancy"]:
        table.add_column(col, justify="right")
    for size, figures in result["by_size"].items():
        table.add_row(
            str(size),
            f"{figures['load_ratio_median']:.3f}",
            f"{figures['plans_ratio_median']:.3f}",
            f"{figures['ratio_median']:.3f}",
            f"{figures['packing_ratio_median']:.4f}",
        )
    console.print(table)
    first = result["timing"][0]
    table = Table(
        title=f"one epoch of {first['apps']} apps (plan + pack), {first['repeats']} runs: median (min-max) "
        f"ms; target <= {TARGET_EPOCH_S * 1000:.0f} ms on one core; dispatchable: the control loop's solver"
    )
    cols = ["solver", "cold CPU", "cold wall", "solve wall", "registered CPU", "reused CPU", "reused wall"]
    for col in [*cols, "bill/bound", "errors", "load avg"]:
        table.add_column(col, justify="right")
    for timing in result["timing"]:
        table.add_row(
            timing["solver"],
            _ms(timing["cold_cpu"]),
            _ms(timing["cold_wall"]),
            _ms(timing["cold_solve_wall"]),
            _ms(timing["registered_cpu"]) if timing.get("registered_cpu") else "-",
            _ms(timing["reused_cpu"]),
            _ms(timing["reused_wall"]),
            f"{timing['ratio']:.3f}",
            f"{timing['errors']} / {timing['reused_errors']}",
            f"{timing['load_avg'][0]:.2f}-{timing['load_avg'][1]:.2f}",
        )
    console.print(table)
    for timing in result["timing"]:
        for name, pc in (timing.get("changed") or {}).items():
            cold = name == "cold"
            change = (
                "no previous plan"
                if cold
                else ", ".join(f"{hw} x{factor:g}" for hw, factor in pc["change"].items())
            )
            last = ", ".join(f"{ratio:.4f}" for ratio in pc["last_billed_over_unbudgeted"])
            quick = "/".join(str(run["epochs"][0]["quick"]) for run in pc["runs"])
            console.print(
                f"{CHANGE_NAMES[name]} ({timing['solver']}; {change}): "
                f"{pc['changed_apps']} apps {'to plan' if cold else 'whose problems changed'}; "
                f"solved at once {_ms(pc['unbudgeted_cpu'])} ms "
                f"CPU; with a {pc['budget_s']:g} s solve budget every epoch "
                f"{_ms(pc['budgeted_epoch_cpu'])} ms "
                f"(the first {_ms(pc['first_epoch_cpu'])}, {quick} quick plans, its bill at most "
                f"{pc['first_billed_over_unbudgeted']:.4f} x the solved one), none carried after "
                f"{'/'.join(map(str, pc['epochs_to_converge']))} epochs, billing {last} x; the same solver "
                f"plans as solving at once: {pc['same_solved_plans']}"
            )
    for timing in result["timing"]:
        if timing.get("registration_solve_cpu"):
            run = timing["registration_solve_cpu"]
            console.print(
                f"registered ({timing['solver']}): every app's registration solved it "
                f"({run['median_ms']:.1f} ms CPU median, {run['max_ms']:.1f} max per app); the epoch took "
                f"{timing['seeded_apps']} of those plans; "
                f"same fleet as the cold epoch: {timing['same_fleet_seeded']}"
            )
    replay = result["verification"]
    console.print(
        f"replay of {replay['shared_instances']} shared instances: "
        f"{replay['within']}/{replay['share_runs']} share runs "
        f"within planned + added wait (max excess {replay['max_excess_s'] * 1000:.4f} ms; "
        f"the adversarial phases reach {replay['max_adversarial_wait_over_added_wait']:.3f} "
        f"of the added wait); {replay['aligned_instances']} "
        f"aligned: {replay['aligned_share_runs']} share runs at the packer's phases, largest wait "
        f"{replay['aligned_max_wait_s'] * 1e6:.3f} us "
        "(random/adversarial phases: within the FIFO bound above)"
    )
    st = result["steady"]
    table = Table(
        title=f"steady load +-{st['noise']:.0%} with Poisson counts: epochs {st['warmup']}-"
        f"{st['epochs'] - 1} (after {st['warmup']} warm-up epochs)"
    )
    cols = ["hardware", "warm-up changes", "changes", "packed-target changes", "max per 2 epochs", "min gap"]
    for col in [*cols, "spare=1: changes", "max per 2", "min gap"]:
        table.add_column(col, justify="right")
    for hw, figures in st["per_hardware"].items():
        sp = figures["spare"]
        table.add_row(
            hw,
            str(figures["warmup_changes"]),
            str(figures["changes"]),
            str(figures["raw_target_changes"]),
            str(figures["max_changes_per_2_epochs"]),
            "-" if figures["min_gap_epochs"] is None else str(figures["min_gap_epochs"]),
            str(sp["changes"]),
            str(sp["max_changes_per_2_epochs"]),
            "-" if sp["min_gap_epochs"] is None else str(sp["min_gap_epochs"]),
        )
    console.print(table)
    console.print(
        f"capacity cost / packed target cost: {st['capacity_over_target']:.4f} (spare=1: "
        f"{st['capacity_over_target_spare']:.4f})"
    )
    cpu = st["epoch_cpu"]
    console.print(
        f"apps re-planned per epoch: {st['mean_replanned_apps']:.1f}; shares moved to another slot per "
        f"epoch: {st['mean_moved_shares']:.1f}"
        + (f"; epoch CPU {_ms(cpu)} ms ({result['solver']} solver)" if cpu else "")
    )
    runs = result["steady_runs"]
    table = Table(
        title=f"steady load, {len(runs)} runs (40 apps each, epochs {st['warmup']}-{st['epochs'] - 1}): "
        "target <= 1 scale change per hardware type per two epochs"
    )
    for col in [
        "run",
        "fleet seed",
        "noise seed",
        "max per 2 epochs",
        "types over",
        "changes",
        "capacity/target",
    ]:
        table.add_column(col, justify="right")
    table.add_column("re-planned apps/epoch", justify="right")
    for run in runs:
        table.add_row(
            str(run["run"]),
            str(run["fleet_seed"]),
            str(run["noise_seed"]),
            str(run["max_changes_per_2_epochs"]),
            ", ".join(run["types_over"]) or "-",
            str(run["changes"]),
            f"{run['capacity_over_target']:.4f}",
            f"{run['mean_replanned_apps']:.2f}",
        )
    console.print(table)
    met = sum(1 for run in runs if run["max_changes_per_2_epochs"] <= 1)
    console.print(f"steady-load target met in {met} of {len(runs)} runs")
    hl = result["host"]["load_avg"]
    console.print(f"{result['wall_s']:.0f} s wall, load avg {hl[0]:.2f}, {hl[1]:.2f}, {hl[2]:.2f}")
