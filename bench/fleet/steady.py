"""The fleet benchmark's replay of every shared instance (:func:`verify`) and its noisy steady load
(:func:`steady`): scale changes per hardware type per two epochs, as the control loop would make them."""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.fleet.common import SOLVE_BUDGET_S, solver_for, summary_ms
from planner.fleet import plan_fleet
from planner.packing import adversarial_phases, simulate_instance
from planner.scaling import Hysteresis, forecast_rate

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import ProblemSpec


EPOCH_S = 60.0  # seconds of traffic behind one observed rate
WARMUP = 5  # steady-load epochs before the forecast's trend window is full (not counted as steady)


def verify(fleet: Any, problems: Mapping[str, ProblemSpec], seeds: int = 3) -> dict[str, Any]:
    """Replay every shared instance. FIFO instances: random phases and, per share, the adversarial
    phases, against planned + added wait. Aligned instances: the packer's phases (wait must be 0), then
    random and adversarial phases against the FIFO bound (what holds if the phases are not honoured)."""
    apps = {app: (problems[app], fleet.plans[app]) for app in fleet.plans}
    checked = within = 0
    worst_excess = -math.inf
    tight = 0.0
    aligned_runs = aligned_max_wait = 0.0
    for inst in fleet.fleet.instances:
        if len(inst.shares) < 2:
            continue
        runs = [
            simulate_instance(inst, apps, seed=seed, periods=100, honour_phases=False)
            for seed in range(seeds)
        ]
        if inst.aligned:
            own = simulate_instance(inst, apps, periods=100)
            runs.append(own)
            aligned_runs += len(own)
            aligned_max_wait = max(aligned_max_wait, *(share_run.max_wait_s for share_run in own))
        for victim in range(len(inst.shares)):
            phases = adversarial_phases(inst, apps, victim)
            adv = simulate_instance(inst, apps, phases=phases, periods=20)[victim]
            runs.append([adv])
            if adv.added_wait_s > 0:
                tight = max(tight, adv.max_wait_s / adv.added_wait_s)
        for run in runs:
            for share_run in run:
                checked += 1
                within += share_run.within
                worst_excess = max(worst_excess, share_run.measured_worst_s - share_run.bound_s)
    return {
        "shared_instances": fleet.fleet.shared_instances,
        "aligned_instances": sum(1 for instance in fleet.fleet.instances if instance.aligned),
        "share_runs": checked,
        "within": within,
        "max_excess_s": worst_excess if checked else 0.0,
        "max_adversarial_wait_over_added_wait": tight,
        "aligned_share_runs": int(aligned_runs),
        "aligned_max_wait_s": aligned_max_wait,
    }


def steady(
    problems: Mapping[str, ProblemSpec], epochs: int, noise: float, seed: int, solver: str = "dispatchable"
) -> dict[str, Any]:
    """Noisy steady load as the control loop sees it (control/epoch.py): every epoch each app's
    frame rate is drawn +-``noise`` around its mean and observed as a Poisson count over the epoch; the
    rate planned is :func:`~planner.scaling.forecast_rate` of the app's observed history (the module rates
    follow the frame rate, as through the edges' fan-outs); then re-plan (with ``solver``; a plan still
    covering the rates is kept by ``plan_fleet``), pack and scale. Counts scale changes and times every
    epoch (CPU)."""
    rng = np.random.default_rng(seed)
    history: dict[str, list[float]] = defaultdict(list)
    hyst, spare = Hysteresis(), Hysteresis(spare=1)
    current: dict[str, int] = {}
    with_spare: dict[str, int] = {}
    prev = None
    rows = []
    for epoch in range(epochs):
        planned: dict[str, ProblemSpec] = {}
        for app, problem in problems.items():
            frames = problem.modules[problem.order()[0]].rate  # the root's rate: the app's frame rate
            true = frames * (1 + rng.uniform(-noise, noise))
            history[app].append(float(rng.poisson(true * EPOCH_S)) / EPOCH_S)
            scale = max(1e-3, forecast_rate(history[app])) / frames
            modules = {
                module: spec.model_copy(update={"rate": spec.rate * scale})
                for module, spec in problem.modules.items()
            }
            planned[app] = problem.model_copy(update={"modules": modules})
        cpu = time.process_time()
        res = plan_fleet(
            planned,
            previous=prev.fleet if prev else None,
            previous_plans=prev.plans if prev else None,
            solver=solver_for(solver),
            solve_budget_s=SOLVE_BUDGET_S if solver == "dispatchable" else None,  # as the control loop
        )
        cpu_ms = (time.process_time() - cpu) * 1000
        target = res.fleet.counts()
        desired = hyst.desired(target, current, epoch)
        desired_spare = spare.desired(target, with_spare, epoch)
        moved = _moved(prev.fleet if prev else None, res.fleet)
        rows.append(
            {
                "epoch": epoch,
                "target": target,
                "desired": desired,
                "changed": sorted(hw for hw in desired if desired[hw] != current.get(hw, 0)),
                "desired_spare": desired_spare,
                "changed_spare": sorted(
                    hw for hw in desired_spare if desired_spare[hw] != with_spare.get(hw, 0)
                ),
                "target_changed": sorted(
                    hw for hw in target if prev is not None and target[hw] != prev.fleet.counts().get(hw, 0)
                ),
                "replanned": len(res.plans) - len(res.reused),
                "cpu_ms": cpu_ms,
                "moved_shares": moved,
                "billed": res.fleet.billed_per_hour,
                "prices": res.fleet.prices,
            }
        )
        current, with_spare, prev = desired, desired_spare, res
    return _steady_summary(rows, epochs, noise)


def _moved(before: Any, after: Any) -> int:
    """Shares whose (app, module, config) key sits on a slot that did not hold it before."""
    if before is None:
        return 0
    old = {(instance.slot, share.key) for instance in before.instances for share in instance.shares}
    return sum(
        1
        for instance in after.instances
        for share in instance.shares
        if (instance.slot, share.key) not in old
    )


def _hw_stats(rows: list[dict[str, Any]], hw: str, suffix: str, epochs: int) -> dict[str, Any]:
    after = rows[WARMUP:]
    changes = [row["epoch"] for row in after if hw in row["changed" + suffix]]
    per_2 = max(
        (sum(1 for epoch in changes if epoch in (start, start + 1)) for start in range(WARMUP, epochs)),
        default=0,
    )
    gaps = [later - earlier for earlier, later in zip(changes, changes[1:], strict=False)]
    return {
        "warmup_changes": sum(1 for row in rows[1:WARMUP] if hw in row["changed" + suffix]),
        "changes": len(changes),
        "max_changes_per_2_epochs": per_2,
        "min_gap_epochs": min(gaps) if gaps else None,
    }


def _overhead(rows: list[dict[str, Any]], key: str) -> float:
    """Capacity cost over the packed target's cost, after the warm-up."""
    cap = sum(row["prices"][hw] * count for row in rows[WARMUP:] for hw, count in row[key].items())
    want = sum(row["prices"][hw] * count for row in rows[WARMUP:] for hw, count in row["target"].items())
    return cap / want if want else 1.0


def _steady_summary(rows: list[dict[str, Any]], epochs: int, noise: float) -> dict[str, Any]:
    """Figures over the epochs after the warm-up (the forecast's trend window filling up: WARMUP epochs),
    plus the scale changes during the warm-up; for the default hysteresis and with one spare instance."""
    hws = sorted({hw for row in rows for hw in row["desired"]})
    after = rows[WARMUP:]
    per_hw = {
        hw: {
            **_hw_stats(rows, hw, "", epochs),
            "raw_target_changes": sum(1 for row in after if hw in row["target_changed"]),
            "spare": _hw_stats(rows, hw, "_spare", epochs),
        }
        for hw in hws
    }
    return {
        "epochs": epochs,
        "warmup": WARMUP,
        "noise": noise,
        "per_hardware": per_hw,
        "max_changes_per_2_epochs": max(
            (stats["max_changes_per_2_epochs"] for stats in per_hw.values()), default=0
        ),
        "max_changes_per_2_epochs_spare": max(
            (stats["spare"]["max_changes_per_2_epochs"] for stats in per_hw.values()), default=0
        ),
        "capacity_over_target": _overhead(rows, "desired"),
        "capacity_over_target_spare": _overhead(rows, "desired_spare"),
        "mean_replanned_apps": statistics.fmean(row["replanned"] for row in after) if after else 0.0,
        "mean_moved_shares": statistics.fmean(row["moved_shares"] for row in after) if after else 0.0,
        "epoch_cpu": summary_ms([row["cpu_ms"] for row in after]) if after else None,
        "_rows": rows,
    }


def steady_run(run: int, summary: dict[str, Any], apps: int, seed: int) -> dict[str, Any]:
    """One steady-load run's summary: the target's figures, no per-epoch rows."""
    return {
        "run": run,
        "fleet_seed": seed * 1000 + run,
        "noise_seed": seed + run,
        "apps": min(apps, 40),
        "max_changes_per_2_epochs": summary["max_changes_per_2_epochs"],
        "changes": sum(stats["changes"] for stats in summary["per_hardware"].values()),
        "types_over": sorted(
            hw for hw, stats in summary["per_hardware"].items() if stats["max_changes_per_2_epochs"] > 1
        ),
        "capacity_over_target": summary["capacity_over_target"],
        "mean_replanned_apps": summary["mean_replanned_apps"],
    }
