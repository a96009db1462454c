"""The instance agent: one process per fleet instance (``python -m workers.instance --hardware HW``).

This module wires the agent (:mod:`workers.agent`) from the environment (the config and results
tables, the queues, the bucket, the metrics sink, IMDS, the Auto Scaling termination hook and the
directory of its workers' receipt journals, :func:`receipts_dir`), and
its ``main`` runs it until a drain: SIGTERM, a scale-in or a Spot notice. Model names and profiles
come from the app registry (registered apps), else from the profile store (the packaged demo apps);
the registry is the control plane's store, read here only (the one import from ``control``).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from control.registration.store import AppRegistry
from core.adapters._aws import AWS_ERRORS
from core.adapters.blobs import BlobStore
from core.adapters.config_items import ConfigItems
from core.adapters.plan_store import InstanceStatus, PlanStore
from core.adapters.queues import TaskQueues
from core.adapters.results import ResultStore
from core.clients import make_client, make_metrics
from core.errors import DataPlaneError
from core.settings import DataPlaneConfig, delete_linger_from_env
from profiles.errors import ProfilesError
from profiles.hardware import gpu_hardware
from profiles.s3store import S3Store
from profiles.store import PACKAGE_ROOT, LayeredStore, LocalStore, cache_dir, default_store
from workers.agent import InstanceAgent
from workers.lifecycle import (
    AutoScalingCompleter,
    ImdsClient,
    LifecycleError,
    LifecycleWatcher,
    install_signal_handlers,
)
from workers.lifeline import install as install_lifeline
from workers.onsite import BeforeClaim, instance_info, nvidia_driver
from workers.recording import RecordLinger, record_linger_from_env
from workers.runtimes import device_name, make_runtime
from workers.shares import ModelResolver, RuntimeCache, WorkerServices

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "BOOT_CHECK_EXIT",
    "EMF_USAGE_EVERY_S",
    "PROFILES_PREFIX",
    "boot_problem",
    "build_agent",
    "main",
    "receipts_dir",
]

#: exit status of a failed boot check (systemd does not restart it: RestartPreventExitStatus)
BOOT_CHECK_EXIT = 3
_CUDA = "CUDAExecutionProvider"


def boot_problem(
    provider: str | None,
    run: Callable[..., Any] = subprocess.run,
    load: Callable[..., Any] = ctypes.CDLL,
) -> str | None:
    """Why this machine cannot serve its class, or None. ``provider`` is the onnxruntime execution
    provider the class's plan assumes ($SKINFLINT_REQUIRE_PROVIDER; None: no check, the local stack):
    onnxruntime must import and list it, and for CUDA a GPU must be visible (``nvidia-smi -L``) and
    the CUDA provider's library must load with its CUDA and cuDNN libraries (otherwise onnxruntime
    would quietly run every model on the CPU at CPU speed)."""
    if not provider:
        return None
    try:
        import onnxruntime as ort  # the boot check only: it needs the runtime the shares will use
    except ImportError as exc:
        return f"onnxruntime does not import: {exc}"
    available = list(ort.get_available_providers())
    if provider not in available:
        return f"{provider} is not in this onnxruntime build (it has {', '.join(available) or 'none'})"
    return _cuda_problem(ort, run, load) if provider == _CUDA else None


def _cuda_problem(ort: Any, run: Callable[..., Any], load: Callable[..., Any]) -> str | None:
    try:
        smi = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no GPU visible: nvidia-smi -L: {exc}"
    if smi.returncode != 0 or "GPU " not in (smi.stdout or ""):
        detail = ((smi.stderr or smi.stdout or "").strip().splitlines() or [f"exit {smi.returncode}"])[-1]
        return f"no GPU visible: nvidia-smi -L: {detail}"
    capi = Path(ort.__file__).parent / "capi"
    try:  # what onnxruntime does to enable the provider: the shared bridge, then the CUDA library
        load(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        load(str(capi / "libonnxruntime_providers_cuda.so"))
    except OSError as exc:
        return f"{_CUDA} does not load: {exc}"
    return None


def _mark_unhealthy(instance_id: str) -> None:
    """Tell Auto Scaling to replace this instance (it serves nothing); best effort, logged."""
    cfg = DataPlaneConfig.from_env()
    try:
        make_client("autoscaling", cfg, "instance").set_instance_health(
            InstanceId=instance_id, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False
        )
    except AWS_ERRORS as exc:  # the check's failure is what matters; this is logged
        print(f"instance {instance_id}: could not mark itself unhealthy: {exc}", file=sys.stderr)


def _resolver(ddb: Any, s3: Any, cfg: Any) -> ModelResolver:
    """Model names and profiles from the app registry (registered apps), else the profile store
    (the packaged demo apps); ONNX files from ``$SKINFLINT_MODEL_DIR`` (default: the build cache)."""
    registry = AppRegistry(ConfigItems(ddb, cfg.config_table), BlobStore(s3, cfg.bucket))
    store = default_store()
    specs: dict[str, Any] = {}

    def spec_of(app: str) -> Any:
        if app not in specs:
            got = registry.get(app)
            specs[app] = got[1] if got is not None else store.load_app(app)
        return specs[app]

    def profile_of(model: str) -> list[Any]:
        for spec in specs.values():
            entries = (getattr(spec, "profiles", None) or {}).get(model)
            if entries:
                return list(entries)
        return store.load_profile_dicts(model)

    model_dir = os.environ.get("SKINFLINT_MODEL_DIR") or str(cache_dir() / "models")
    return ModelResolver(spec_of, profile_of, model_dir)


#: S3 prefix of the shared profile store (``control.service.PROFILES_PREFIX``: the planner reads it)
PROFILES_PREFIX = "profiles"


def _before_claim(
    args: argparse.Namespace,
    instance_id: str,
    plans: PlanStore,
    s3: Any,
    bucket: str,
    resolver: ModelResolver,
) -> tuple[RuntimeCache, BeforeClaim | None]:
    """The runtime cache (the CUDA provider on a GPU class) and the hook run before a claim:
    the provider check and the on-instance profiling into the shared profile store
    (``--onsite-profiles``; workers/onsite.py)."""
    store = LayeredStore([S3Store(s3, bucket, PROFILES_PREFIX), LocalStore(PACKAGE_ROOT)])
    try:
        catalog = store.load_catalog()
    except ProfilesError as exc:
        logging.getLogger("skinflint.instance").warning("hardware catalog not read: %s", exc)
        catalog = default_store().load_catalog()
    gpu = args.hardware in gpu_hardware(catalog)
    runtimes = RuntimeCache(make=partial(make_runtime, gpu=gpu))
    if args.onsite_profiles == "off" and not gpu:
        return runtimes, None
    spec = catalog.get(args.hardware)
    info = instance_info(
        (spec.instance_type if spec is not None else None) or args.hardware,
        gpu,
        device_name(gpu),
        nvidia_driver() if gpu else os.uname().release,
    )
    hook = BeforeClaim(
        hardware=args.hardware,
        instance_id=instance_id,
        fleet=plans.fleet,
        deployment=plans.deployment,
        resolve=resolver,
        runtimes=runtimes,
        instance=info,
        store=None if args.onsite_profiles == "off" else store,
        gpu=gpu,
        require_onsite=args.onsite_profiles == "all",
        budget_s=args.onsite_budget_s,
    )
    return runtimes, hook


#: s between the usage meter's counts in an EMF agent's lines (``EmfMetrics.collect_every_s``)
EMF_USAGE_EVERY_S = 60.0


def _record_linger(args: argparse.Namespace) -> RecordLinger | None:
    """The instance's record linger (workers/recording.py; main() read its settings), None at 0 s."""
    linger_s, margin_s = getattr(args, "record_linger", None) or record_linger_from_env()
    return RecordLinger(linger_s, margin_s) if linger_s > 0 else None


def build_agent(args: argparse.Namespace) -> tuple[InstanceAgent, Any]:
    """Wire an agent from the environment (tables, clients, IMDS, lifecycle)."""
    cfg = DataPlaneConfig.from_env()
    imds = ImdsClient(args.imds_url) if not args.no_lifecycle or not args.instance_id else None
    instance_id = args.instance_id or (imds.instance_id() if imds else "")
    ddb, s3 = make_client("dynamodb", cfg, "instance"), make_client("s3", cfg, "instance")
    plans = PlanStore(ddb, cfg.config_table)
    # PutMetricData, or EMF lines (SKINFLINT_METRICS_SINK), the usage counts then once a minute (the
    # agent closes its metrics when it stops: nothing counted is left behind)
    emf = cfg.metrics_sink == "emf"
    metrics = make_metrics(cfg, "instance", collect_every_s=EMF_USAGE_EVERY_S if emf else 0.0)
    resolver = _resolver(ddb, s3, cfg)
    runtimes, before_claim = _before_claim(args, instance_id, plans, s3, cfg.bucket, resolver)
    completer = None
    asg, hook = os.environ.get("SKINFLINT_ASG_NAME"), os.environ.get("SKINFLINT_DRAIN_HOOK")
    if asg and hook:
        completer = AutoScalingCompleter(make_client("autoscaling", cfg, "instance"), asg, hook).complete
    agent = InstanceAgent(
        instance_id=instance_id,
        hardware=args.hardware,
        plans=plans,
        services=WorkerServices(
            queues=TaskQueues(make_client("sqs", cfg, "instance")),
            results=ResultStore(ddb, cfg.results_table, cfg.results_retention_s),
            blobs=BlobStore(s3, cfg.bucket),
            metrics=metrics,
            output_inline_limit_bytes=cfg.output_inline_limit_bytes,
            payload_inline_limit_bytes=cfg.inline_limit_bytes,
            delete_linger_s=args.delete_linger_s,
            record_linger=_record_linger(args),
        ),
        resolve=resolver,
        runtimes=runtimes,
        before_claim=before_claim,
        heartbeat=lambda info: plans.put_instance(InstanceStatus.model_validate(info)),
        complete_lifecycle=completer,
        watcher=None
        if args.no_lifecycle or imds is None
        else LifecycleWatcher(imds, poll_s=args.lifecycle_poll_s),
        poll_s=args.poll_s,
        recheck_s=args.recheck_s,
        retire_grace_s=args.retire_grace_s,
        receipts_dir=receipts_dir(instance_id),
    )
    return agent, metrics


def receipts_dir(instance_id: str, env: Mapping[str, str] | None = None) -> Path:
    """Where this instance's workers journal the receipts they hold (workers/receipts.py):
    ``$SKINFLINT_STATE_DIR``, else systemd's ``$STATE_DIRECTORY`` (the unit's ``StateDirectory=``,
    cdk/userdata.py), else ``<cache>/agents``; then ``<instance id>/receipts``: one per agent, also
    where several agents share a machine (the local stack), the same across its restarts."""
    environ = os.environ if env is None else env
    base = environ.get("SKINFLINT_STATE_DIR") or environ.get("STATE_DIRECTORY", "").split(":")[0]
    root = Path(base).expanduser() if base else cache_dir() / "agents"
    return root / (instance_id or "instance").replace("/", "_") / "receipts"


def _parser() -> argparse.ArgumentParser:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(prog="python -m workers.instance", description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", required=True, help="hardware class of this instance (catalog name)")
    parser.add_argument("--instance-id", default=None, help="default: IMDS instance-id (on EC2)")
    parser.add_argument(
        "--imds-url",
        default=os.environ.get("SKINFLINT_IMDS_URL", "http://169.254.169.254"),
        help="instance metadata service (default $SKINFLINT_IMDS_URL or EC2's)",
    )
    parser.add_argument(
        "--no-lifecycle", action="store_true", help="do not watch IMDS for scale-in / Spot notices"
    )
    parser.add_argument("--poll-s", type=float, default=1.0, help="seconds between plan-pointer reads")
    parser.add_argument("--recheck-s", type=float, default=10.0, help="seconds between claims while idle")
    parser.add_argument(
        "--retire-grace-s", type=float, default=2.0, help="old shares served this long after activation"
    )
    parser.add_argument("--lifecycle-poll-s", type=float, default=1.0, help="seconds between IMDS reads")
    parser.add_argument(
        "--delete-linger-s",
        type=float,
        default=None,
        help="seconds a processed message's delete may wait to share a DeleteMessageBatch, 0-10 "
        "(default $SKINFLINT_DELETE_LINGER_S or 1.0; 0: delete at once)",
    )
    parser.add_argument(
        "--boot-check",
        action="store_true",
        help="only check that $SKINFLINT_REQUIRE_PROVIDER loads (and a GPU is visible for CUDA); "
        f"exit 0 or {BOOT_CHECK_EXIT}",
    )
    parser.add_argument(
        "--onsite-profiles",
        choices=("derived", "all", "off"),
        default="derived",
        help="before the first claim, measure the models planned on this class that have only derived "
        "entries (derived), or no entry measured on an instance of the class (all), or none (off)",
    )
    parser.add_argument(
        "--onsite-budget-s", type=float, default=120.0, help="seconds the on-instance sweep may start models"
    )
    return parser


def _boot_gate(args: argparse.Namespace, name: str) -> int | None:
    """The boot check's exit status when the agent must stop here (``--boot-check``, or a failed
    check: no slot is claimed, and on EC2 the instance marks itself unhealthy), else None."""
    problem = boot_problem(os.environ.get("SKINFLINT_REQUIRE_PROVIDER"))
    if problem is not None:  # the instance cannot serve its class's plan
        print(f"instance {name}: boot check failed ({args.hardware}): {problem}", file=sys.stderr)
        if not args.boot_check and args.instance_id and os.environ.get("SKINFLINT_ASG_NAME"):
            _mark_unhealthy(args.instance_id)
        return BOOT_CHECK_EXIT
    if args.boot_check:
        print(f"instance {name}: boot check passed ({args.hardware})")
        return 0
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.poll_s <= 0 or args.recheck_s <= 0 or args.retire_grace_s < 0:
        print("instance: --poll-s and --recheck-s must be positive, --retire-grace-s >= 0", file=sys.stderr)
        return 2
    try:
        DataPlaneConfig.from_env()  # checked here (names, retention, limits): build_agent reads it again
    except ValueError as exc:
        print(f"instance: {exc}", file=sys.stderr)
        return 2
    if args.delete_linger_s is None:
        try:
            args.delete_linger_s = delete_linger_from_env()
        except ValueError as exc:
            print(f"instance: {exc}", file=sys.stderr)
            return 2
    elif not 0 <= args.delete_linger_s <= 10:
        linger = args.delete_linger_s
        print(f"instance: --delete-linger-s must be within [0, 10], got {linger:g}", file=sys.stderr)
        return 2
    try:
        args.record_linger = record_linger_from_env()
    except ValueError as exc:
        print(f"instance: {exc}", file=sys.stderr)
        return 2
    name = args.instance_id or "instance"
    checked = _boot_gate(args, name)
    return _serve(args, name) if checked is None else checked


def _serve(args: argparse.Namespace, name: str) -> int:
    """Run the agent until it drains (main, once the arguments and the boot check passed)."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(name)s %(message)s")
    try:
        agent, metrics = build_agent(args)
    except (DataPlaneError, LifecycleError) as exc:
        print(f"instance {name}: {exc}", file=sys.stderr)
        return 2
    install_signal_handlers(agent.request_drain)
    # local stack only ($SKINFLINT_PARENT_PID; off under systemd on EC2): if the process that
    # started this agent dies, SIGTERM this one, which drains as above
    install_lifeline()
    metrics.start()
    try:
        agent.run()
    finally:
        metrics.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
