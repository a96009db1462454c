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
    apps = {a: (problems[a], fleet.plans[a]) for a in fleet.plans}
    checked = within = 0
    worst_excess = -math.inf
    tight = 0.0
    aligned_runs = aligned_max_wait = 0.0
    for inst in fleet.fleet.instances:
        if len(inst.shares) < 2:
            continue
        runs = [simulate_instance(inst, apps, seed=s, periods=100, honour_phases=False) for s in range(seeds)]
        if inst.aligned:
            own = simulate_instance(inst, apps, periods=100)
            runs.append(own)
            aligned_runs += len(own)
            aligned_max_wait = max(aligned_max_wait, *(r.max_wait_s for r in own))
        for v in range(len(inst.shares)):
            adv = simulate_instance(inst, apps, phases=adversarial_phases(inst, apps, v), periods=20)[v]
            runs.append([adv])
            if adv.added_wait_s > 0:
                tight = max(tight, adv.max_wait_s / adv.added_wait_s)
        for run in runs:
            for r in run:
                checked += 1
                within += r.within
                worst_excess = max(worst_excess, r.measured_worst_s - r.bound_s)
    return {
        "shared_instances": fleet.fleet.shared_instances,
        "aligned_instances": sum(1 for i in fleet.fleet.instances if i.aligned),
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
        for app, p in problems.items():
            frames = p.modules[p.order()[0]].rate  # the root's rate: the app's frame rate
            true = frames * (1 + rng.uniform(-noise, noise))
            history[app].append(float(rng.poisson(true * EPOCH_S)) / EPOCH_S)
            scale = max(1e-3, forecast_rate(history[app])) / frames
            modules = {
                m: spec.model_copy(update={"rate": spec.rate * scale}) for m, spec in p.modules.items()
            }
            planned[app] = p.model_copy(update={"modules": modules})
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
                "changed": sorted(h for h in desired if desired[h] != current.get(h, 0)),
                "desired_spare": desired_spare,
                "changed_spare": sorted(h for h in desired_spare if desired_spare[h] != with_spare.get(h, 0)),
                "target_changed": sorted(
                    h for h in target if prev is not None and target[h] != prev.fleet.counts().get(h, 0)
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
    old = {(i.slot, s.key) for i in before.instances for s in i.shares}
    return sum(1 for i in after.instances for s in i.shares if (i.slot, s.key) not in old)


def _hw_stats(rows: list[dict[str, Any]], h: str, suffix: str, epochs: int) -> dict[str, Any]:
    after = rows[WARMUP:]
    changes = [r["epoch"] for r in after if h in r["changed" + suffix]]
    per_2 = max((sum(1 for e in changes if e in (k, k + 1)) for k in range(WARMUP, epochs)), default=0)
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    return {
        "warmup_changes": sum(1 for r in rows[1:WARMUP] if h in r["changed" + suffix]),
        "changes": len(changes),
        "max_changes_per_2_epochs": per_2,
        "min_gap_epochs": min(gaps) if gaps else None,
    }


def _overhead(rows: list[dict[str, Any]], key: str) -> float:
    """Capacity cost over the packed target's cost, after the warm-up."""
    cap = sum(r["prices"][h] * n for r in rows[WARMUP:] for h, n in r[key].items())
    want = sum(r["prices"][h] * n for r in rows[WARMUP:] for h, n in r["target"].items())
    return cap / want if want else 1.0


def _steady_summary(rows: list[dict[str, Any]], epochs: int, noise: float) -> dict[str, Any]:
    """Figures over the epochs after the warm-up (the forecast's trend window filling up: WARMUP epochs),
    plus the scale changes during the warm-up; for the default hysteresis and with one spare instance."""
    hws = sorted({h for r in rows for h in r["desired"]})
    after = rows[WARMUP:]
    per_hw = {
        h: {
            **_hw_stats(rows, h, "", epochs),
            "raw_target_changes": sum(1 for r in after if h in r["target_changed"]),
            "spare": _hw_stats(rows, h, "_spare", epochs),
        }
        for h in hws
    }
    return {
        "epochs": epochs,
        "warmup": WARMUP,
        "noise": noise,
        "per_hardware": per_hw,
        "max_changes_per_2_epochs": max((v["max_changes_per_2_epochs"] for v in per_hw.values()), default=0),
        "max_changes_per_2_epochs_spare": max(
            (v["spare"]["max_changes_per_2_epochs"] for v in per_hw.values()), default=0
        ),
        "capacity_over_target": _overhead(rows, "desired"),
        "capacity_over_target_spare": _overhead(rows, "desired_spare"),
        "mean_replanned_apps": statistics.fmean(r["replanned"] for r in after) if after else 0.0,
        "mean_moved_shares": statistics.fmean(r["moved_shares"] for r in after) if after else 0.0,
        "epoch_cpu": summary_ms([r["cpu_ms"] for r in after]) if after else None,
        "_rows": rows,
    }


def steady_run(i: int, summary: dict[str, Any], apps: int, seed: int) -> dict[str, Any]:
    """One steady-load run's summary: the target's figures, no per-epoch rows."""
    return {
        "run": i,
        "fleet_seed": seed * 1000 + i,
        "noise_seed": seed + i,
        "apps": min(apps, 40),
        "max_changes_per_2_epochs": summary["max_changes_per_2_epochs"],
        "changes": sum(v["changes"] for v in summary["per_hardware"].values()),
        "types_over": sorted(
            h for h, v in summary["per_hardware"].items() if v["max_changes_per_2_epochs"] > 1
        ),
        "capacity_over_target": summary["capacity_over_target"],
        "mean_replanned_apps": summary["mean_replanned_apps"],
    }
