"""Starting a local stack: the apps' models built on first use, each app planned for this machine, the
stack assembled (``skinflint up``, ``skinflint demo``, ``skinflint loadtest`` and ``skinflint bench
abuse`` all start it this way). Bad settings are a :class:`~skinflint.errors.UsageError` (one line)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skinflint.errors import UsageError

if TYPE_CHECKING:
    from skinflint.local.stack import LocalStack

__all__ = ["DEFAULT_EPOCH_S", "DEFAULT_RETENTION_S", "ensure_models", "make_stack"]

DEFAULT_EPOCH_S = 10.0  # s between local planning epochs (the minimum a deployment allows)
# s the local stack keeps a frame's items and the metric data points past a run (moto holds them in
# memory: about 110 KB per traffic frame, 0.4 GB an hour at 4 frames/s); a run's results are read after it
DEFAULT_RETENTION_S = 3600.0


def ensure_models(apps: list[str], log: Any) -> None:
    """Build and profile the apps' models on first use (cached under ``$SKINFLINT_CACHE``)."""
    # CLI start-up: loaded when this command runs
    from profiles.build import CPU_MODELS, BuildConfig, build, models_for_apps
    from profiles.errors import ProfilesError
    from profiles.store import PACKAGE_ROOT, LayeredStore, LocalStore, cache_dir

    cache = cache_dir()
    store = LayeredStore([LocalStore(cache), LocalStore(PACKAGE_ROOT)])
    try:
        models = models_for_apps(store, apps)
    except ProfilesError as exc:
        raise UsageError(str(exc)) from exc
    missing = [
        model
        for model in models
        if model not in store.list_models()
        or (model not in CPU_MODELS and not (cache / "models" / f"{model}.onnx").is_file())
    ]
    if not missing:
        return
    log(f"building and profiling {', '.join(missing)} (first run only; cached in {cache})")
    (cache / "models").mkdir(parents=True, exist_ok=True)
    try:
        build(store, cache / "models", apps, BuildConfig())
    except ProfilesError as exc:
        raise UsageError(f"models build failed: {exc}") from exc


def make_stack(
    apps: list[str],
    rate: float,
    slo: float | None,
    log: Any,
    log_dir: str | None,
    epoch_s: float = DEFAULT_EPOCH_S,
    retention_s: float = DEFAULT_RETENTION_S,
) -> LocalStack:
    from skinflint.local.planning import plan_local  # torch-free, but the planner and onnx: on use
    from skinflint.local.stack import LocalStack, StackConfig

    if rate <= 0:
        raise UsageError(f"--rate must be positive, got {rate:g}")
    if not 2 <= epoch_s <= 3600:
        raise UsageError(f"--epoch must be between 2 and 3600 seconds, got {epoch_s:g}")
    if slo is not None and slo <= 0:
        raise UsageError(f"--slo must be positive, got {slo:g}")
    # CLI start-up: loaded when this command runs
    from profiles.store import default_store

    known = default_store().list_apps()
    unknown = [app for app in apps if app not in known]
    if unknown:
        raise UsageError(f"unknown app {', '.join(unknown)} (known: {', '.join(known)})")
    ensure_models(apps, log)

    def plan_fn(app: str, overhead_s: float) -> Any:
        # CLI start-up: loaded when this command runs
        from planner.errors import PlannerError
        from profiles.errors import ProfilesError

        try:
            return plan_local(app, rate, overhead_s, slo_s=slo)
        except (PlannerError, ProfilesError) as exc:
            raise UsageError(f"cannot plan {app} at {rate:g} frames/s on this machine: {exc}") from exc

    config = StackConfig(epoch_s=epoch_s, retention_s=retention_s)
    return LocalStack(apps, plan_fn, log=log, log_dir=log_dir, config=config)
