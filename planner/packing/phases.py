"""Phases of the shares' schedules: the packer's aligned turns written into the plans, and the phases the
replay uses (the packer's, or adversarial ones)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import Plan, ProblemSpec
    from planner.packing.models import FleetPlan, Instance

__all__ = ["adversarial_phases", "aligned_phases", "apply_phases"]


def apply_phases(apps: Mapping[str, tuple[ProblemSpec, Plan]], fleet: FleetPlan) -> dict[str, Plan]:
    """The plans ``fleet`` runs: every module on an aligned instance with its share's configuration and
    rate (the extra as dummy load), ``schedule_phase_s`` (the phase the front's routing and the workers
    honour: ``planner.dispatch.schedule_origin``) and ``duty_cycle_s``; other plans unchanged. The
    worst-case figures are kept (the packer never lets ``d + b / f`` grow)."""
    aligned = {
        (s.app, s.module): (s, inst.cycle_s)
        for inst in fleet.instances
        if inst.aligned and inst.cycle_s is not None
        for s in inst.shares
    }
    out: dict[str, Plan] = {}
    for name in sorted(apps):
        problem, plan = apps[name]
        mine = {m: v for (a, m), v in aligned.items() if a == name}
        if not mine:
            out[name] = plan
            continue
        modules = dict(plan.modules)
        for m, (s, cycle) in mine.items():
            mp = modules[m]
            g = mp.groups[0].model_copy(
                update={
                    "batch": s.batch,
                    "concurrency": s.concurrency,
                    "duration_s": s.duration_s,
                    "rate_per_machine": s.rate,
                }
            )
            price = problem.hardware[g.hardware].price_per_hour
            modules[m] = mp.model_copy(
                update={
                    "groups": [g],
                    "dummy_rate": max(0.0, s.rate - problem.modules[m].rate),
                    "occupancy_per_hour": price * s.occupancy,
                    "schedule_phase_s": s.phase_s,
                    "duty_cycle_s": cycle,
                }
            )
        occ = sum(
            g.machines
            * problem.hardware[g.hardware].price_per_hour
            * g.rate_per_machine
            * g.duration_s
            / (g.concurrency * g.batch)
            for mp in modules.values()
            for g in mp.groups
        )
        out[name] = plan.model_copy(update={"modules": modules, "cost_per_hour": occ})
    return out


def aligned_phases(instance: Instance) -> dict[tuple[str, str, int, int], float]:
    """The packer's phases of an aligned instance, for :func:`simulate_instance`: each share's module
    schedule starts at its ``phase_s`` (a module with one machine has its window ends at multiples of
    its period, so its batches are ready at ``phase_s + k * cycle_s``)."""
    return {s.ident: s.phase_s for s in instance.shares if s.phase_s is not None}


def adversarial_phases(
    instance: Instance, apps: Mapping[str, tuple[ProblemSpec, Plan]], victim: int
) -> dict[tuple[str, str, int, int], float]:
    """Phases under which every other share's first batch becomes ready just before the ``victim``'s first
    batch (the case behind ``added_wait_s``), for :func:`simulate_instance`."""
    # Loaded here, not at the top: the dispatch schedules need numpy, which the front and the workers
    # (they import planner.packing for its models) do not load at cold start.
    from planner.dispatch import build_schedule

    firsts = {}
    for s in instance.shares:
        prices = {h: x.price_per_hour for h, x in apps[s.app][0].hardware.items()}
        sched = build_schedule(s.module, apps[s.app][1].modules[s.module], prices)
        w = sched.windows
        firsts[s.ident] = float(w.end[(w.group == s.group) & (w.machine == s.machine)].min())
    target = instance.shares[victim]
    at = 10.0 + firsts[target.ident]  # victim's first batch ready at t = 10 + its first end
    out = {target.ident: 10.0}
    for k, s in enumerate(x for j, x in enumerate(instance.shares) if j != victim):
        out[s.ident] = at - 1e-7 * (k + 1) - firsts[s.ident]
    return out
