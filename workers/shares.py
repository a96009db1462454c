"""What one share of an instance runs: which runtime and model it needs (:class:`ModelResolver`),
its :class:`~core.schema.Assignment` in a plan version (:func:`assignment_for`), the models loaded
on the instance (:class:`RuntimeCache`), the adapters its worker uses (:class:`WorkerServices`)
and its worker serving on a thread (:class:`ShareRunner`). The instance agent
(:mod:`workers.agent`) puts them together."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import DataPlaneError
from core.schema import SERVICE_CORRECTION_KEY, Assignment, queue_key
from core.settings import SQS_INLINE_LIMIT_BYTES
from workers.runtimes import make_runtime

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from core.adapters.metrics import Metrics
    from core.schema import Deployment
    from planner.models import ModulePlan
    from planner.packing import Share
    from workers.runtimes import Runtime
    from workers.worker import Worker

__all__ = [
    "ModelResolver",
    "RuntimeCache",
    "ShareRunner",
    "WorkerServices",
    "assignment_for",
    "runner_key",
]

log = logging.getLogger("skinflint.instance")


class ModelResolver:
    """Which runtime a share needs: ``(runtime, model, model_path, threads)``. Emulated when the
    deployment emulates the hardware class, the app's spec is unknown or no model file is there (results
    say so); otherwise the app's ONNX model from ``model_dir`` with the onnxruntime threads its profile
    entry used. A spec that could not be read is an error (the adoption is tried again), not emulation.

    ``spec_of(app)`` returns the app's spec (anything with ``modules[m].model``: a registered
    ``RegistrationSpec`` or a ``planner.models.AppSpec``); ``profile_of(model)`` its profile entries
    (``ProfileEntry`` or dicts; ``threads`` is an extra key of a measured entry)."""

    def __init__(
        self,
        spec_of: Callable[[str], Any],
        profile_of: Callable[[str], list[Any]],
        model_dir: str,
    ):
        self._spec_of = spec_of
        self._profile_of = profile_of
        self._model_dir = model_dir
        self._models: dict[tuple[str, str], str] = {}

    def _model(self, app: str, module: str) -> str:
        key = (app, module)
        if key not in self._models:
            spec = self._spec_of(app)
            self._models.update(
                {(app, module_name): module_spec.model for module_name, module_spec in spec.modules.items()}
            )
        return self._models.get(key, "")

    def _threads(self, model: str, share: Share) -> int:
        try:
            entries = self._profile_of(model)
        except Exception:  # noqa: BLE001 - no profile here means the default thread count
            return 1
        for entry in entries:
            fields = entry if isinstance(entry, dict) else {**entry.model_dump(), **(entry.model_extra or {})}
            if (fields.get("hardware"), fields.get("batch"), fields.get("concurrency", 1)) == (
                share.hardware,
                share.batch,
                share.concurrency,
            ):
                return int(fields.get("threads") or 1)
        return 1

    def __call__(self, deployment: Deployment, share: Share) -> tuple[str, str, str | None, int]:
        """Raises :class:`~core.errors.DataPlaneError` when the app's spec could not be *read* (the
        registry or S3 failed): the agent's step fails and adopts again at its next step, the shares in
        hand still serving. Before, such a failure emulated the share: a network blip at adoption served
        emulated results for the whole version."""
        try:
            model = self._model(share.app, share.module)
        except DataPlaneError:
            raise
        except Exception as exc:  # noqa: BLE001 - an unknown app spec: emulate, labelled so
            log.warning("no app spec for %s: %s", share.app, exc)
            model = ""
        path = os.path.join(self._model_dir, f"{model}.onnx") if model else None
        if share.hardware in deployment.emulated_hardware or path is None or not os.path.isfile(path):
            return "emulated", model, None, 1
        return "onnx", model, path, self._threads(model, share)


def _hop_in_duration(mp: ModulePlan | None, overhead_s: float) -> float:
    """The hop a module plan's durations hold: none when its groups carry it as ``overhead_s``."""
    if mp is not None and any(group.overhead_s > 0 for group in mp.groups):
        return 0.0
    return overhead_s


def _group_overhead(mp: ModulePlan | None, group: int) -> float:
    """The latency-only hop of a module plan's group (0 for a plan that holds it in its durations)."""
    if mp is None or not 0 <= group < len(mp.groups):
        return 0.0
    return mp.groups[group].overhead_s


def assignment_for(
    share: Share,
    deployment: Deployment,
    instance_id: str,
    resolve: Callable[[Deployment, Share], tuple[str, str, str | None, int]],
) -> Assignment:
    """The :class:`Assignment` of one share of this instance in ``deployment``'s version."""
    queues = deployment.queues.get(share.module, {})
    url = queues.get(queue_key(share.group, share.machine))
    if url is None:
        raise DataPlaneError(
            f"deployment {deployment.app} v{deployment.version} has no queue for "
            f"{share.module} group {share.group} machine {share.machine}"
        )
    runtime, model, path, threads = resolve(deployment, share)
    mp = deployment.plan.modules.get(share.module)
    corrections = (mp.model_extra or {}).get(SERVICE_CORRECTION_KEY) if mp is not None else None
    correction = float((corrections or {}).get(share.hardware, 0.0))
    return Assignment(
        worker_id=f"{instance_id}:{share.app}.{share.module}.g{share.group}.m{share.machine}",
        app=share.app,
        module=share.module,
        group=share.group,
        machine=share.machine,
        hardware=share.hardware,
        batch=share.batch,
        concurrency=share.concurrency,
        duration_s=share.duration_s,
        overhead_s=_group_overhead(mp, share.group),
        # what emulation sleeps: the profile's duration, without the hop overhead (a plan that carries
        # it apart, as each group's latency-only overhead_s, has none in its durations) and without the
        # service-time correction the plan learned (control/calibration.py)
        model_s=max(share.duration_s - _hop_in_duration(mp, deployment.overhead_s) - correction, 0.0),
        added_wait_s=share.added_wait_s,
        queue_url=url,
        runtime="onnx" if runtime == "onnx" else "emulated",
        model=model,
        model_path=path,
        threads=threads,
    )


class RuntimeCache:
    """Loaded models of this instance, shared by every worker that runs the same one: a share that
    moves to another queue or version keeps its loaded model (no reload)."""

    def __init__(self, make: Callable[[Assignment], Runtime] | None = None):
        self._make = make or make_runtime
        self._loaded: dict[tuple[Any, ...], Runtime] = {}
        self.loads = 0

    @staticmethod
    def key(assignment: Assignment) -> tuple[Any, ...]:
        if assignment.runtime == "onnx" and assignment.model_path:
            return ("onnx", assignment.model_path, assignment.threads)
        return (
            "emulated",
            assignment.hardware,
            assignment.model_s if assignment.model_s is not None else assignment.duration_s,
        )

    def get(self, assignment: Assignment) -> Runtime:
        key = self.key(assignment)
        if key not in self._loaded:
            self._loaded[key] = self._make(assignment)
            self.loads += 1
        return self._loaded[key]

    def keep_only(self, assignments: list[Assignment]) -> None:
        """Unload the models no share uses any more."""
        used = {self.key(assignment) for assignment in assignments}
        for key in [key for key in self._loaded if key not in used]:
            del self._loaded[key]


@dataclass
class WorkerServices:
    """The adapters every worker of the instance shares (one set of clients per process)."""

    queues: Any  # core.adapters.queues.TaskQueues
    results: Any  # core.adapters.results.ResultStore
    blobs: Any  # core.adapters.blobs.BlobStore
    metrics: Metrics
    output_inline_limit_bytes: int = 64 * 1024
    payload_inline_limit_bytes: int = SQS_INLINE_LIMIT_BYTES  # a child's crop inline up to this (base64)
    grace_s: float = 0.02
    io_threads: int = 3  # threads for the I/O of finished batches (result writes, forwarding, deletes)
    delete_linger_s: float = 0.0  # workers.worker.Worker.delete_linger_s (main(): from the environment)
    # the records of several batches in one write (workers/recording.py), shared by every worker of
    # the instance; None: each batch's records at once (main(): SKINFLINT_RECORD_LINGER_S)
    record_linger: Any = None


@dataclass(eq=False)  # compared by identity
class ShareRunner:
    """One share's worker serving its queue on a thread."""

    key: tuple[Any, ...]  # queue and configuration: equal key = nothing to reload or restart
    share: Share
    version: int
    worker: Worker
    thread: threading.Thread
    retiring: bool = False
    retire_after: float = 0.0
    empty_since: float | None = None

    def stop(self, wait_for_poll: bool = True) -> None:
        """Stop the worker (:meth:`workers.worker.Worker.stop`: a retirement need not wait for its
        receive in flight, a drain does)."""
        self.worker.stop(wait_for_poll=wait_for_poll)


def runner_key(assignment: Assignment) -> tuple[Any, ...]:
    return (
        assignment.queue_url,
        assignment.hardware,
        assignment.batch,
        assignment.concurrency,
        assignment.duration_s,
        RuntimeCache.key(assignment),
    )
