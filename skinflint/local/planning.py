"""Plan an app for THIS machine: profiles measured here (``skinflint models build``, cached), GPU
classes emulated from their profiles, and the stack's real overheads added to what the plan assumes.

Adjustments made to the stored profiles before planning (all reported by the demo):
- a measured entry's duration is its p95 when the profile has one (``p95_s``), not its median;
- a real CPU entry's duration is scaled by the contention measured now (:func:`calibrate_cpu`: the
  worker's own runtime timed on this host, with everything else running, against the profile's p95;
  never below 1) and by :data:`CPU_SHARE_FACTOR` for the stack's own processes that start later (the
  front, the workers, the client streaming frames: measured in demo runs, docs/dispatch.md);
- every entry gets ``overhead_s`` added: the measured cost of one hop (SQS send + long-poll receive;
  the result write comes after the forward), the worker's batch-closing grace and JPEG decoding;
- real (non-emulated) CPU machines share this host's cores, so at most ``max_real_cpu_machines`` are
  planned: while a plan needs more, the module with the most CPU machines loses its CPU entries and
  the app is re-planned (the displaced modules run on emulated GPU classes).

The plan itself is dispatch-aware (:func:`planner.robust.solve_dispatchable`): each module's worst case
is what the time-window dispatch realises (schedule bound, bursts of children: at most ``ceil(f)``
children per parent request for a fan-out factor ``f``), children get the capacity their bursts need.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from control.problems import adjust_profiles, solve_within_caps
from planner.robust import solve_dispatchable
from profiles.build import detect_gpu
from profiles.hardware import cpu_hardware, gpu_hardware
from profiles.store import cache_dir, default_store, load_problem
from skinflint.local.video import synthetic_frames
from workers.runtimes import OnnxRuntime

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from planner.models import AppSpec, MachineGroup, Plan, ProblemSpec

__all__ = ["LocalPlan", "plan_local"]

GRACE_S = 0.02  # the worker's batch-closing grace (workers.worker.Worker.grace_s)
DECODE_S = 0.01  # JPEG decode + resize of a batch of small frames, worst case seen here
CHILD_HEADROOM = 0.0  # minimum extra planned rate of a child module (docs/dispatch.md, "Child headroom")
CPU_SHARE_FACTOR = 1.0  # real CPU durations x this for the stack processes not yet running at planning
CALIBRATION_RUNS = 12  # timed runs of each real CPU model (after 2 warm-up runs)


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
    # the most machines of each real CPU class (this host's cores): the control loop plans within it
    machine_caps: dict[str, int] = field(default_factory=dict)

    def threads(self, module: str, group: MachineGroup) -> int:
        """onnxruntime threads of a group's machine: those of the profile entry the plan chose."""
        for entry in self.problem.modules[module].profile:
            if (entry.hardware, entry.batch, entry.concurrency) == (
                group.hardware,
                group.batch,
                group.concurrency,
            ):
                return int((entry.model_extra or {}).get("threads") or 1)
        return 1

    def model_path(self, model: str) -> str | None:
        return _model_file(self.model_dir, model)

    def hardware_label(self, hardware: str) -> str:
        return f"{hardware} (emulated)" if hardware in self.emulated_hardware else hardware


def _model_file(model_dir: Path, model: str) -> str | None:
    path = model_dir / f"{model}.onnx"
    return str(path) if path.is_file() else None


def _is_real_cpu(hardware: str, catalog: dict[str, Any], gpu_here: str | None) -> bool:
    kind = (catalog[hardware].model_extra or {}).get("kind")
    return kind == "cpu" or hardware == gpu_here


def calibrate_cpu(
    problem: ProblemSpec,
    app: AppSpec,
    is_real: Callable[[str], bool],
    model_path: Callable[[str], str | None],
) -> dict[str, float]:
    """Contention factor per module with real CPU entries: the worker's runtime (the model on one decoded
    frame, the threads of the module's batch-1 CPU entry) timed now on this host, p95 of
    :data:`CALIBRATION_RUNS`, over the profile's batch-1 p95. At least 1; modules without an ONNX
    model (pure-CPU stages) or without a batch-1 entry are left out."""
    frame = synthetic_frames(1)[0]
    out: dict[str, float] = {}
    for name, mod in problem.modules.items():
        ref = [
            entry
            for entry in mod.profile
            if is_real(entry.hardware) and entry.batch == 1 and entry.concurrency == 1
        ]
        path = model_path(app.modules[name].model)
        if not ref or path is None:
            continue
        entry = min(ref, key=lambda candidate: candidate.duration_s)
        extra = entry.model_extra or {}
        runtime = OnnxRuntime(path, threads=int(extra.get("threads") or 1))
        batch = [runtime.prepare(frame, [0.1, 0.1, 0.5, 0.5])]  # decoding is budgeted apart (DECODE_S)
        times = []
        for run in range(CALIBRATION_RUNS + 2):
            t0 = time.perf_counter()
            runtime.run(batch)
            if run >= 2:
                times.append(time.perf_counter() - t0)
        times.sort()
        p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
        profile_p95 = float(extra.get("p95_s") or entry.duration_s)
        out[name] = max(1.0, p95 / profile_p95)
    return out


def _scale_cpu(
    problem: ProblemSpec, factors: dict[str, float], is_real: Callable[[str], bool]
) -> ProblemSpec:
    """Real CPU entries' durations (p95 when measured) times the module's factor; p95 kept consistent."""
    modules = dict(problem.modules)
    for name, factor in factors.items():
        mod = problem.modules[name]
        entries = []
        for entry in mod.profile:
            if not is_real(entry.hardware):
                entries.append(entry)
                continue
            extra = entry.model_extra or {}
            duration_s = float(extra.get("p95_s") or entry.duration_s) * factor
            update: dict[str, Any] = {"duration_s": duration_s}
            if "p95_s" in extra:
                update["p95_s"] = duration_s
            entries.append(entry.model_copy(update=update))
        modules[name] = mod.model_copy(update={"profile": entries})
    return problem.model_copy(update={"modules": modules})


def plan_local(
    app_name: str,
    frame_rate: float,
    overhead_s: float,
    *,
    slo_s: float | None = None,
    hardware: list[str] | None = None,
    max_real_cpu_machines: int = 1,
    solve: Callable[[ProblemSpec], Plan] | None = None,
    calibrate: bool = True,
) -> LocalPlan:
    """Plan ``app_name`` at ``frame_rate`` for the local stack (see the module doc)."""
    store = default_store()
    catalog = store.load_catalog()
    gpu_here = detect_gpu()
    local_cpu = cpu_hardware(catalog)[0]  # the class the build measured this host as
    if hardware is None:
        hardware = [local_cpu] + [hw for hw in gpu_hardware(catalog) if catalog[hw].instance_type]
    app = store.load_app(app_name)
    hop = overhead_s + GRACE_S + DECODE_S
    problem = load_problem(app_name, frame_rate, hardware=hardware, slo_s=slo_s, store=store)

    def is_real(hw: str) -> bool:
        return _is_real_cpu(hw, catalog, gpu_here)

    model_dir = cache_dir() / "models"
    contention = (
        calibrate_cpu(problem, app, is_real, lambda model: _model_file(model_dir, model)) if calibrate else {}
    )
    factors = {module: factor * CPU_SHARE_FACTOR for module, factor in contention.items()}
    problem = adjust_profiles(_scale_cpu(problem, factors, is_real), hop)
    fan_out = {(src, dst): float(math.ceil(fan - 1e-9)) for src, dst, fan in app.edges}
    solve_fn = solve or partial(_default_solve, fan_out=fan_out)
    notes = [
        f"each profile duration: p95 when measured, plus {hop * 1e3:.0f} ms per hop "
        "(SQS send and receive, grace, decode)"
    ]
    notes += [
        f"{module}: real CPU durations x {factor:.2f} (contention measured now x{contention[module]:.2f}, "
        f"stack share x{CPU_SHARE_FACTOR:g})"
        for module, factor in factors.items()
    ]
    caps = {hw: max_real_cpu_machines for hw in problem.hardware if _is_real_cpu(hw, catalog, gpu_here)}
    plan, problem, moved = solve_within_caps(problem, solve_fn, caps)
    notes += [f"{note}: this host's cores run the real CPU machines" for note in moved]
    used = {group.hardware for mp in plan.modules.values() for group in mp.groups}
    emulated = sorted(hw for hw in used if not _is_real_cpu(hw, catalog, gpu_here))
    return LocalPlan(
        app=app,
        problem=problem,
        plan=plan,
        frame_rate=frame_rate,
        slo_s=problem.slo_s,
        emulated_hardware=emulated,
        model_dir=model_dir,
        overhead_s=hop,
        notes=notes,
        machine_caps=caps,
    )


def _default_solve(problem: ProblemSpec, fan_out: dict[tuple[str, str], float]) -> Plan:
    """The dispatch-aware solve: the plan's worst cases are what the time-window dispatch realises
    (schedule bound, bursts of children: at most ``ceil(fan-out)`` per parent request)."""
    return solve_dispatchable(problem, fan_out=fan_out, child_headroom=CHILD_HEADROOM)
