"""What an instance does before it claims a slot (issue #27): check that its runtime serves its class
on the provider it asks for, and measure on its own device the models planned on its class that are
not measured there yet (:mod:`profiles.onsite`), so that the control loop plans them from measured
entries at its next epoch.

:class:`BeforeClaim` is the agent's ``before_claim`` hook (:class:`workers.agent.InstanceAgent`): the
agent calls it with a plan version while it holds no slot (at boot, or idle), never while it serves
(a sweep on a device that serves would measure the contention and slow the serving). It reads the
version's packed fleet, takes the shares of every slot of its hardware class, and

1. :func:`check_providers` (GPU classes): loads each planned model through the agent's runtime cache,
   as its worker will (the CUDA provider or :class:`~workers.runtimes.ProviderError`, which the agent
   answers by claiming nothing); the loaded models stay cached for the claim;
2. :func:`planned_points` then :func:`profiles.onsite.measure_on_instance`: the planned batches (and
   the powers of two either side of each, so the next plan can move a step), with the
   ``(concurrency, threads)`` the worker serves with, within ``budget_s``; progress is logged; the
   entries go to the shared profile store with the instance's provenance.

A version is handled once; a model is measured at most once per agent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.errors import DataPlaneError
from profiles.errors import ProfilesError, StoreError
from profiles.onsite import InstanceInfo, OnsiteReport, measure_on_instance
from workers.shares import assignment_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.schema import Deployment
    from planner.packing import FleetPlan, Share
    from profiles.store import ProfileStore
    from workers.shares import RuntimeCache

__all__ = [
    "BeforeClaim",
    "PlannedPoints",
    "check_providers",
    "instance_info",
    "nvidia_driver",
    "planned_points",
]

log = logging.getLogger("skinflint.instance")


@dataclass
class PlannedPoints:
    """The real (not emulated) models a hardware class's slots run: ONNX file, batches and the
    ``(concurrency, threads)`` their workers serve with, and one share of each (for a runtime)."""

    paths: dict[str, str] = field(default_factory=dict)
    batches: dict[str, set[int]] = field(default_factory=dict)
    series: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    shares: dict[str, tuple[Share, Deployment]] = field(default_factory=dict)


def planned_points(
    fleet: FleetPlan,
    hardware: str,
    deployment: Callable[[str], Deployment | None],
    resolve: Callable[[Deployment, Share], tuple[str, str, str | None, int]],
) -> PlannedPoints:
    """The models planned on ``hardware`` in ``fleet`` (every slot of the class: which one this
    instance claims is not known yet), resolved as the agent resolves a share."""
    out = PlannedPoints()
    for inst in fleet.instances:
        if inst.hardware != hardware:
            continue
        for share in inst.shares:
            dep = deployment(share.app)
            if dep is None:
                continue
            runtime, model, path, threads = resolve(dep, share)
            if runtime != "onnx" or not path:
                continue  # emulated (or no model file here): nothing real to measure
            out.paths[model] = path
            out.batches.setdefault(model, set()).add(share.batch)
            out.series.setdefault(model, set()).add((share.concurrency, threads))
            out.shares.setdefault(model, (share, dep))
    return out


def _with_neighbours(planned: set[int]) -> list[int]:
    """The planned batches and, for each, the next power of two below and above it (the batch grid
    profiles are built on: 1, 2, 4, ...), so a re-plan can move one step on measured entries."""
    out = set(planned)
    for batch in planned:
        below = 1 << ((batch - 1).bit_length() - 1) if batch > 1 else 0
        out.update(b for b in (below, 1 << batch.bit_length()) if b >= 1)
    return sorted(out)


@dataclass(frozen=True)
class _Fixed:
    """A resolver that answers one model whatever the share (the model is known already)."""

    resolved: tuple[str, str, str | None, int]

    def __call__(self, _dep: Deployment, _share: Share) -> tuple[str, str, str | None, int]:
        return self.resolved


def check_providers(points: PlannedPoints, runtimes: RuntimeCache, instance_id: str) -> list[str]:
    """Load every planned model through ``runtimes`` as its worker will (the runtime's provider
    check runs: :class:`~workers.runtimes.ProviderError` propagates). Returns the models loaded."""
    loaded = []
    for model, (share, dep) in sorted(points.shares.items()):
        threads = max((t for c, t in points.series[model] if c == share.concurrency), default=1)
        assignment = assignment_for(
            share, dep, instance_id, _Fixed(("onnx", model, points.paths[model], threads))
        )
        runtimes.get(assignment)
        loaded.append(model)
    return loaded


@dataclass
class BeforeClaim:
    """The agent's hook before a claim (see the module doc). ``fleet(version)`` and
    ``deployment(version, app)`` read the plan store; ``resolve`` is the agent's model resolver;
    ``store`` the shared profile store (``None``: no measuring); ``gpu``: the class is a GPU (the
    provider check, and the sweep on CUDA); ``require_onsite``: measure also models whose entries on
    the class were measured on a development host, not on an instance of it."""

    hardware: str
    instance_id: str
    fleet: Callable[[int], FleetPlan | None]
    deployment: Callable[[int, str], Deployment | None]
    resolve: Callable[[Deployment, Share], tuple[str, str, str | None, int]]
    runtimes: RuntimeCache
    instance: InstanceInfo
    store: ProfileStore | None = None
    gpu: bool = False
    require_onsite: bool = False
    budget_s: float = 120.0
    runs: int = 20
    measure: Callable[..., OnsiteReport] = measure_on_instance
    log: Callable[[str], None] = log.info
    _done: set[int] = field(default_factory=set, init=False)
    _measured: set[str] = field(default_factory=set, init=False)
    reports: list[OnsiteReport] = field(default_factory=list, init=False)

    def __call__(self, version: int) -> None:
        """Raises :class:`~workers.runtimes.ProviderError` (GPU class, wrong provider): claim nothing.
        Any other failure is logged: the instance claims with the profiles as they are."""
        if version in self._done:
            return
        fleet = self.fleet(version)
        if fleet is None:
            return
        points = planned_points(fleet, self.hardware, lambda app: self.deployment(version, app), self.resolve)
        self._done.add(version)  # once, whatever happens below (a failure is not retried every poll)
        if self.gpu and points.paths:
            loaded = check_providers(points, self.runtimes, self.instance_id)
            self.log(f"{self.hardware}: {len(loaded)} model(s) load on {self.instance.provider}")
        todo = {model: path for model, path in points.paths.items() if model not in self._measured}
        if self.store is None or not todo:
            return
        t0 = time.monotonic()
        try:
            report = self.measure(
                self.store,
                todo,
                self.hardware,
                sorted({b for model in todo for b in points.batches[model]}),
                self.instance,
                runs=self.runs,
                budget_s=self.budget_s,
                use_gpu=self.gpu,
                series={model: sorted(points.series[model]) for model in todo},
                per_model_batches={model: _with_neighbours(points.batches[model]) for model in todo},
                require_onsite=self.require_onsite,
                log=self.log,
            )
        except (StoreError, ProfilesError, DataPlaneError, OSError) as exc:
            self.log(f"on-instance profiling failed after {time.monotonic() - t0:.1f} s: {exc}")
            return
        self._measured.update(todo)
        self.reports.append(report)


def instance_info(
    instance_type: str, gpu: bool, device: str, driver: str = "", ort_version: str | None = None
) -> InstanceInfo:
    """The provenance an instance writes with its measurements."""
    if ort_version is None:
        import onnxruntime as ort  # the runtime the worker serves with

        ort_version = str(ort.__version__)
    provider = "CUDAExecutionProvider" if gpu else "CPUExecutionProvider"
    return InstanceInfo(instance_type, device, driver or "-", f"onnxruntime {ort_version}", provider)


def nvidia_driver() -> str:
    """The NVIDIA driver version (nvidia-smi), empty when there is none."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0] if out else ""
