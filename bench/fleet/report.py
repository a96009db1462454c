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
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    sizes = sorted(result["by_size"])
    for key, label, marker in [
        ("dedicated_ratio", "dedicated (solver's plans)", "s"),
        ("ratio", "packed fleet (this work)", "o"),
        ("latency_free_ratio", "latency-free packing (no SLO check)", "^"),
    ]:
        xs = [f["size"] for f in result["fleets"]]
        ys = [f[key] for f in result["fleets"]]
        ax.scatter(xs, ys, marker=marker, alpha=0.5, label=label)
        ax.plot(sizes, [statistics.median(f[key] for f in result["fleets"] if f["size"] == s) for s in sizes])
    ax.axhline(TARGET_RATIO, color="k", ls="--", lw=1, label=f"target {TARGET_RATIO}")
    ax.set_xscale("log")
    ax.set_xlabel("apps in the fleet")
    ax.set_ylabel("billed $/h / occupancy lower bound")
    ax.set_title(f"cost per fleet size ({result['seeds']} seeds each)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    rows = result["steady"]["_rows"]
    for h in sorted({h for r in rows for h in r["desired"]}):
        line = ax2.plot(
            [r["epoch"] for r in rows], [r["desired"].get(h, 0) for r in rows], label=f"{h} desired"
        )
        ax2.plot(
            [r["epoch"] for r in rows],
            [r["target"].get(h, 0) for r in rows],
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


def _ms(x: dict[str, float]) -> str:
    return f"{x['median_ms']:.0f} ({x['min_ms']:.0f}-{x['max_ms']:.0f})"


def render(result: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 120))
    table = Table(
        title=f"billed cost after packing / occupancy lower bound (median, min-max over seeds; "
        f"{result['solver']} solver)"
    )
    cols = ["apps", "fleets", "packed", "min-max", "FIFO only", "dedicated", "latency-free", "shared inst."]
    for col in [*cols, "aligned inst.", "errors"]:
        table.add_column(col, justify="right")
    for size, s in result["by_size"].items():
        table.add_row(
            str(size),
            str(s["fleets"]),
            f"{s['ratio_median']:.3f}",
            f"{s['ratio_min']:.3f}-{s['ratio_max']:.3f}",
            f"{s['fifo_only_ratio_median']:.3f}",
            f"{s['dedicated_ratio_median']:.3f}",
            f"{s['latency_free_ratio_median']:.3f}",
            f"{s['shared_instances_median']:g}",
            f"{s['aligned_instances_median']:g}",
            str(s["errors"]),
        )
    console.print(table)
    table = Table(
        title="where the bill goes, per $/h of the occupancy lower bound (median over seeds): the apps' "
        "requests on the plans' machines, the plans' occupancy (requests + capacity held for the "
        "guarantees), the bill after packing"
    )
    for col in ["apps", "requests", "plans' occupancy", "billed", "billed / plans' occupancy"]:
        table.add_column(col, justify="right")
    for size, s in result["by_size"].items():
        table.add_row(
            str(size),
            f"{s['load_ratio_median']:.3f}",
            f"{s['plans_ratio_median']:.3f}",
            f"{s['ratio_median']:.3f}",
            f"{s['packing_ratio_median']:.4f}",
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
    for t in result["timing"]:
        table.add_row(
            t["solver"],
            _ms(t["cold_cpu"]),
            _ms(t["cold_wall"]),
            _ms(t["cold_solve_wall"]),
            _ms(t["registered_cpu"]) if t.get("registered_cpu") else "-",
            _ms(t["reused_cpu"]),
            _ms(t["reused_wall"]),
            f"{t['ratio']:.3f}",
            f"{t['errors']} / {t['reused_errors']}",
            f"{t['load_avg'][0]:.2f}-{t['load_avg'][1]:.2f}",
        )
    console.print(table)
    for t in result["timing"]:
        for name, pc in (t.get("changed") or {}).items():
            cold = name == "cold"
            change = "no previous plan" if cold else ", ".join(f"{h} x{f:g}" for h, f in pc["change"].items())
            last = ", ".join(f"{x:.4f}" for x in pc["last_billed_over_unbudgeted"])
            quick = "/".join(str(r["epochs"][0]["quick"]) for r in pc["runs"])
            console.print(
                f"{CHANGE_NAMES[name]} ({t['solver']}; {change}): "
                f"{pc['changed_apps']} apps {'to plan' if cold else 'whose problems changed'}; "
                f"solved at once {_ms(pc['unbudgeted_cpu'])} ms "
                f"CPU; with a {pc['budget_s']:g} s solve budget every epoch "
                f"{_ms(pc['budgeted_epoch_cpu'])} ms "
                f"(the first {_ms(pc['first_epoch_cpu'])}, {quick} quick plans, its bill at most "
                f"{pc['first_billed_over_unbudgeted']:.4f} x the solved one), none carried after "
                f"{'/'.join(map(str, pc['epochs_to_converge']))} epochs, billing {last} x; the same solver "
                f"plans as solving at once: {pc['same_solved_plans']}"
            )
    for t in result["timing"]:
        if t.get("registration_solve_cpu"):
            r = t["registration_solve_cpu"]
            console.print(
                f"registered ({t['solver']}): every app's registration solved it "
                f"({r['median_ms']:.1f} ms CPU median, {r['max_ms']:.1f} max per app); the epoch took "
                f"{t['seeded_apps']} of those plans; "
                f"same fleet as the cold epoch: {t['same_fleet_seeded']}"
            )
    v = result["verification"]
    console.print(
        f"replay of {v['shared_instances']} shared instances: {v['within']}/{v['share_runs']} share runs "
        f"within planned + added wait (max excess {v['max_excess_s'] * 1000:.4f} ms; the adversarial phases "
        f"reach {v['max_adversarial_wait_over_added_wait']:.3f} of the added wait); {v['aligned_instances']} "
        f"aligned: {v['aligned_share_runs']} share runs at the packer's phases, largest wait "
        f"{v['aligned_max_wait_s'] * 1e6:.3f} us (random/adversarial phases: within the FIFO bound above)"
    )
    st = result["steady"]
    table = Table(
        title=f"steady load +-{st['noise']:.0%} with Poisson counts: epochs {st['warmup']}-"
        f"{st['epochs'] - 1} (after {st['warmup']} warm-up epochs)"
    )
    cols = ["hardware", "warm-up changes", "changes", "packed-target changes", "max per 2 epochs", "min gap"]
    for col in [*cols, "spare=1: changes", "max per 2", "min gap"]:
        table.add_column(col, justify="right")
    for h, x in st["per_hardware"].items():
        sp = x["spare"]
        table.add_row(
            h,
            str(x["warmup_changes"]),
            str(x["changes"]),
            str(x["raw_target_changes"]),
            str(x["max_changes_per_2_epochs"]),
            "-" if x["min_gap_epochs"] is None else str(x["min_gap_epochs"]),
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
    for r in runs:
        table.add_row(
            str(r["run"]),
            str(r["fleet_seed"]),
            str(r["noise_seed"]),
            str(r["max_changes_per_2_epochs"]),
            ", ".join(r["types_over"]) or "-",
            str(r["changes"]),
            f"{r['capacity_over_target']:.4f}",
            f"{r['mean_replanned_apps']:.2f}",
        )
    console.print(table)
    met = sum(1 for r in runs if r["max_changes_per_2_epochs"] <= 1)
    console.print(f"steady-load target met in {met} of {len(runs)} runs")
    hl = result["host"]["load_avg"]
    console.print(f"{result['wall_s']:.0f} s wall, load avg {hl[0]:.2f}, {hl[1]:.2f}, {hl[2]:.2f}")
