"""Checker of a fleet plan against the apps' plans: every machine placed once, and every shared instance
within its shares' allowances."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.packing.shares import colocatable_groups, is_elastic, plan_latency_model, plan_shares, share_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import Plan, ProblemSpec
    from planner.packing.models import FleetPlan, Instance, Share

__all__ = ["check_fleet"]


# --------------------------------------------------------------------------- checker


def check_fleet(fleet: FleetPlan, apps: Mapping[str, tuple[ProblemSpec, Plan]]) -> list[str]:
    """Every way ``fleet`` breaks the rules for ``apps``, as readable strings (empty list: valid).

    Checks: every planned machine placed exactly once, with the plan's configuration and rate; shares on
    an instance of their hardware; slots unique; occupancy <= 1 per instance; on a shared instance only
    co-locatable shares, busy fractions summing to <= 1 and each share's recorded added wait covering
    the sum of the other shares' durations; on every root-to-leaf path, each module's worst case
    (the plan's, or a co-located share's standalone bound plus its added wait, if larger) within the SLO.
    """
    errors: list[str] = []
    planned = {s.ident: s for name in sorted(apps) for s in plan_shares(name, apps[name][1])}
    seen: dict[tuple[str, str, int, int], str] = {}
    slots: set[str] = set()
    worst: dict[tuple[str, str], float] = {}
    for inst in fleet.instances:
        if inst.slot in slots:
            errors.append(f"slot {inst.slot} used twice")
        slots.add(inst.slot)
        if inst.hardware not in fleet.prices:
            errors.append(f"{inst.slot}: hardware {inst.hardware!r} has no price")
        if not inst.shares:
            errors.append(f"{inst.slot}: no shares (an idle instance)")
        if inst.occupancy > 1 + 1e-6:
            errors.append(f"{inst.slot}: occupancy {inst.occupancy:.4f} above 1")
        for s in inst.shares:
            if s.ident in seen:
                errors.append(f"{share_name(s)} placed on {seen[s.ident]} and {inst.slot}")
            seen[s.ident] = inst.slot
            if s.hardware != inst.hardware:
                errors.append(
                    f"{share_name(s)} on {inst.slot}: {s.hardware} share on a {inst.hardware} instance"
                )
            ref = planned.get(s.ident)
            if ref is None:
                errors.append(f"{share_name(s)}: no such machine in the plans")
            elif not _same_share(ref, s):
                errors.append(f"{share_name(s)}: configuration or rate differs from the plan")
        _check_shared(inst, apps, errors, worst)
    errors.extend(f"{share_name(s)} not placed" for ident, s in planned.items() if ident not in seen)
    for name in sorted(apps):
        problem, plan = apps[name]
        for path in problem.paths():
            lat = sum(max(plan.modules[m].worst_case_latency_s, worst.get((name, m), 0.0)) for m in path)
            if lat > problem.slo_s + 1e-6:
                errors.append(
                    f"app {name!r} path {' -> '.join(path)}: {lat:.6f} s with added waits, "
                    f"SLO {problem.slo_s} s"
                )
    return errors


def _check_shared(
    inst: Instance,
    apps: Mapping[str, tuple[ProblemSpec, Plan]],
    errors: list[str],
    worst: dict[tuple[str, str], float],
) -> None:
    """Rules of co-location; records each share's worst case with its added wait in ``worst``."""
    shared = len(inst.shares) > 1
    if shared and inst.busy > 1 + 1e-6:
        errors.append(f"{inst.slot}: busy fractions sum to {inst.busy:.4f}, above 1")
    total = sum(s.duration_s for s in inst.shares)
    turns_ok = _check_turns(inst, apps, errors) if inst.aligned else False
    for s in inst.shares:
        if s.app not in apps or s.module not in apps[s.app][1].modules:
            continue
        plan = apps[s.app][1]
        mp = plan.modules[s.module]
        base = colocatable_groups(mp, plan_latency_model(plan)).get(s.group)
        wait = s.added_wait_s
        if shared:
            if base is None:
                errors.append(f"{share_name(s)} on shared {inst.slot}: its module's windows are not periodic")
                continue
            floor = 0.0 if turns_ok else total - s.duration_s
            if wait < floor - 1e-9:
                errors.append(
                    f"{share_name(s)} on {inst.slot}: added wait {wait:.6f} s below the others' "
                    f"durations {floor:.6f} s"
                )
                wait = floor
        k = (s.app, s.module)
        own = base if base is not None else mp.worst_case_latency_s
        worst[k] = max(worst.get(k, 0.0), own + wait)


def _check_turns(inst: Instance, apps: Mapping[str, tuple[ProblemSpec, Plan]], errors: list[str]) -> bool:
    """An aligned instance: every share is its module's only machine, runs one batch per cycle (rate
    ``b / cycle``), its plan carries the phase and cycle the data plane honours, and the turns
    ``[phase, phase + d)`` (mod the cycle) do not overlap, so no batch waits. Also the FIFO bound
    (``fifo_wait_s``) for when the phases are not honoured. True when all of it holds."""
    cycle = inst.cycle_s
    assert cycle is not None
    ok = True
    total = sum(s.duration_s for s in inst.shares)
    for s in inst.shares:
        mp = apps[s.app][1].modules.get(s.module) if s.app in apps else None
        if mp is None:
            return False
        extra = mp.model_extra or {}
        phase, plan_cycle = extra.get("schedule_phase_s"), extra.get("duty_cycle_s")
        problems = []
        if not is_elastic(mp, plan_latency_model(apps[s.app][1])):
            problems.append("its module is not one machine of one configuration")
        if s.phase_s is None or not isinstance(phase, int | float) or abs(phase - s.phase_s) > 1e-9:
            problems.append(f"the plan's schedule phase {phase} is not the share's {s.phase_s}")
        if not isinstance(plan_cycle, int | float) or not math.isclose(plan_cycle, cycle, rel_tol=1e-9):
            problems.append(f"the plan's duty cycle {plan_cycle} is not the instance's {cycle}")
        if s.rate <= 0 or not math.isclose(s.batch / s.rate, cycle, rel_tol=1e-9):
            problems.append(f"batch interval {s.batch / max(s.rate, 1e-300):.6g} s is not the cycle")
        if s.fifo_wait_s < total - s.duration_s - 1e-9:
            problems.append(f"fifo_wait_s {s.fifo_wait_s:.6f} s below the others' durations")
        for msg in problems:
            errors.append(f"{share_name(s)} on aligned {inst.slot}: {msg}")
        ok = ok and not problems
    turns = sorted(((s.phase_s or 0.0) % cycle, s.duration_s, share_name(s)) for s in inst.shares)
    for (x, d, who), (y, _, nxt) in zip(
        turns, [*turns[1:], (turns[0][0] + cycle, 0.0, turns[0][2])], strict=True
    ):
        if x + d > y + 1e-9:
            errors.append(
                f"{inst.slot}: {who}'s turn ends at {x + d:.6f} s, after {nxt}'s starts at {y:.6f} s"
            )
            ok = False
    return ok


def _same_share(ref: Share, s: Share) -> bool:
    return (ref.hardware, ref.batch, ref.concurrency) == (s.hardware, s.batch, s.concurrency) and all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        for a, b in ((ref.duration_s, s.duration_s), (ref.rate, s.rate), (ref.busy, s.busy))
    )
