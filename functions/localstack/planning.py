"""Plan an app for THIS machine: profiles measured here (``skinflint models build``, cached), GPU
classes emulated from their profiles, and the stack's real overheads added to what the plan assumes.

Adjustments made to the stored profiles before planning (all reported by the demo):
- a measured entry's duration is its p95 when the profile has one (``p95_s``), not its median;
- every entry gets ``overhead_s`` added: the measured cost of one hop (SQS send + long-poll receive +
  the conditional result write), the worker's batch-closing grace and JPEG decoding;
- real (non-emulated) CPU machines share this host's cores, so at most ``max_real_cpu_machines`` are
  planned: while a plan needs more, the module with the most CPU machines loses its CPU entries and
  the app is re-planned (the displaced modules run on emulated GPU classes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from planner.models import AppSpec, MachineGroup, Plan, ProblemSpec

__all__ = ["LocalPlan", "plan_local"]

GRACE_S = 0.02  # the worker's batch-closing grace (gpu_fleet.worker.Worker.grace_s)
DECODE_S = 0.01  # JPEG decode + resize of a batch of small frames, worst case seen here


@dataclass
class LocalPlan:
    app: AppSpec
    problem: ProblemSpec
    plan: Plan
    frame_rate: float
    slo_s: float
    emulated_hardware: list[str]
    model_dir: Path
    overhead_s: float
    notes: list[str] = field(default_factory=list)

    def threads(self, module: str, group: MachineGroup) -> int:
        """onnxruntime threads of a group's machine: those of the profile entry the plan chose."""
        for e in self.problem.modules[module].profile:
            if (e.hardware, e.batch, e.concurrency) == (group.hardware, group.batch, group.concurrency):
                return int((e.model_extra or {}).get("threads") or 1)
        return 1

    def model_path(self, model: str) -> str | None:
        p = self.model_dir / f"{model}.onnx"
        return str(p) if p.is_file() else None

    def hardware_label(self, hardware: str) -> str:
        return f"{hardware} (emulated)" if hardware in self.emulated_hardware else hardware


def _adjust(problem: ProblemSpec, overhead_s: float) -> ProblemSpec:
    modules = {}
    for name, mod in problem.modules.items():
        entries = []
        for e in mod.profile:
            extra = e.model_extra or {}
            d = float(extra.get("p95_s") or e.duration_s)
            entries.append(e.model_copy(update={"duration_s": d + overhead_s}))
        modules[name] = mod.model_copy(update={"profile": entries})
    return problem.model_copy(update={"modules": modules})


def _is_real_cpu(hardware: str, catalog: dict[str, Any], gpu_here: str | None) -> bool:
    kind = (catalog[hardware].model_extra or {}).get("kind")
    return kind == "cpu" or hardware == gpu_here


def plan_local(
    app_name: str,
    frame_rate: float,
    overhead_s: float,
    *,
    slo_s: float | None = None,
    hardware: list[str] | None = None,
    max_real_cpu_machines: int = 1,
    solve: Callable[[ProblemSpec], Plan] | None = None,
) -> LocalPlan:
    """Plan ``app_name`` at ``frame_rate`` for the local stack (see the module doc)."""
    from profiles.build import detect_gpu
    from profiles.hardware import cpu_hardware, gpu_hardware
    from profiles.store import cache_dir, default_store, load_problem

    store = default_store()
    catalog = store.load_catalog()
    gpu_here = detect_gpu()
    local_cpu = cpu_hardware(catalog)[0]  # the class the build measured this host as
    if hardware is None:
        hardware = [local_cpu] + [h for h in gpu_hardware(catalog) if catalog[h].instance_type]
    app = store.load_app(app_name)
    hop = overhead_s + GRACE_S + DECODE_S
    problem = _adjust(load_problem(app_name, frame_rate, hardware=hardware, slo_s=slo_s, store=store), hop)
    solve_fn = solve or _default_solve
    notes = [
        f"each profile duration: p95 when measured, plus {hop * 1e3:.0f} ms per hop "
        "(SQS, result write, grace, decode)"
    ]
    while True:
        plan = solve_fn(problem)
        per_module = {
            m: sum(g.machines for g in mp.groups if _is_real_cpu(g.hardware, catalog, gpu_here))
            for m, mp in plan.modules.items()
        }
        if sum(per_module.values()) <= max_real_cpu_machines:
            break
        worst = max(per_module, key=lambda m: per_module[m])
        mod = problem.modules[worst]
        keep = [e for e in mod.profile if not _is_real_cpu(e.hardware, catalog, gpu_here)]
        if not keep:
            break
        notes.append(
            f"{worst}: moved off the local CPU "
            f"(this host runs at most {max_real_cpu_machines} real CPU machine(s))"
        )
        problem = problem.model_copy(
            update={"modules": {**problem.modules, worst: mod.model_copy(update={"profile": keep})}}
        )
    used = {g.hardware for mp in plan.modules.values() for g in mp.groups}
    emulated = sorted(h for h in used if not _is_real_cpu(h, catalog, gpu_here))
    return LocalPlan(
        app=app,
        problem=problem,
        plan=plan,
        frame_rate=frame_rate,
        slo_s=problem.slo_s,
        emulated_hardware=emulated,
        model_dir=cache_dir() / "models",
        overhead_s=hop,
        notes=notes,
    )


def _default_solve(problem: ProblemSpec) -> Plan:
    from planner.solve import solve

    return solve(problem)
