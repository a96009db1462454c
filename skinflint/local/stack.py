"""The local stack: moto's server, the front (uvicorn), the control loop and an emulated fleet.

:class:`LocalStack` runs on one machine the loop a deployment runs on AWS (docs/control.md):

- the apps are registered in the app registry (S3 + DynamoDB in moto) with the profiles the local
  planning chose (``plan_fn``: measured on this host, GPU classes emulated from their profiles);
- one Auto Scaling group per hardware class in moto (:mod:`skinflint.local.fleet`);
- the planner's epoch (``control.service.handle_event``, what the planner Lambda runs)
  is invoked in process on a timer (every ``epoch_s``, 10 s by default; 60 s when deployed): observed
  rates from CloudWatch, plan, pack, publish a version, set each group's desired capacity; between
  epochs the same timer runs the backlog check every ``check_s`` (which also activates a new
  version once its slots are served);
- the fleet emulator honours the desired capacity with ``python -m workers.instance`` processes,
  one per moto instance, each claiming a slot of the current version; scale-in drains (SIGTERM);
- the front reads the plan pointer and dispatches on the version serving now.

It is a context manager; ``skinflint up`` and ``skinflint demo`` both use it. It starts and stops
only its own child processes (by pid)."""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from control.config import ControlConfig
from core.adapters._aws import AWS_ERRORS, error_code
from core.adapters.config_store import ConfigStore
from core.adapters.plan_store import PlanStore
from core.adapters.queues import GONE_CODES
from core.clients import make_client
from core.settings import DataPlaneConfig
from skinflint.errors import SkinflintError
from skinflint.local.emf import EmfExtractor, emulation_client
from skinflint.local.fleet import FleetEmulator, LocalImds, ProcessLauncher, create_groups
from skinflint.local.moto_server import CALLER_ENV, FREEZE_PATH, METER_PATH
from skinflint.local.provision import create_base
from workers.lifeline import child_env, module_argv

if TYPE_CHECKING:
    from collections.abc import Callable

    from control.epoch import Controller
    from core.adapters.plan_store import Manifest
    from core.schema import Deployment
    from skinflint.local.planning import LocalPlan

__all__ = ["LocalStack", "StackConfig", "StackError", "StackInfo", "free_port", "registration_doc"]

log = logging.getLogger("skinflint.stack")

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "skinflint-local",
    "AWS_SECRET_ACCESS_KEY": "skinflint-local",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class StackError(SkinflintError):
    """A process of the local stack did not start or died; ``log`` names its log file."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        if proc.poll() is not None:
            raise StackError(f"{name} exited with {proc.returncode} (log: {log})", str(log))
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise StackError(f"{name} did not answer {url} within {timeout_s:.0f} s (log: {log})", str(log))


def registration_doc(lp: LocalPlan) -> dict[str, Any]:
    """The app registration document of a locally planned app: its DAG, SLO, rate (also the floor:
    the local stack plans for at least the rate it was started with) and, inline, each module's
    profile entries as the local planning left them (measured here, or derived for the emulated GPU
    classes; a module it moved off the local CPU has no CPU entries). The control loop keeps the
    real CPU machines within what this host runs through its ``machine_caps`` (``lp.machine_caps``),
    the same rule. Durations are given back without the hop overhead the local planning added; the
    control loop adds its own (``hop_overhead_s``)."""
    profiles: dict[str, list[dict[str, Any]]] = {}
    for name, mod in lp.app.modules.items():
        entries = profiles.setdefault(mod.model, [])
        for entry in lp.problem.modules[name].profile:
            raw = {**entry.model_dump(), **(entry.model_extra or {})}
            raw["duration_s"] = max(entry.duration_s - lp.overhead_s, 1e-6)
            if raw not in entries:
                entries.append(raw)
    return {
        "name": lp.app.name,
        "slo_s": lp.slo_s,
        "rate": lp.frame_rate,
        "min_rate": lp.frame_rate,
        "modules": {
            module: {"model": spec.model, "kind": spec.kind} for module, spec in lp.app.modules.items()
        },
        "edges": [list(edge) for edge in lp.app.edges],
        "hardware": sorted(lp.problem.hardware),
        "profiles": profiles,
    }


OVERHEAD_PROBES = 16  # timed hops the planned per-hop overhead is the worst of
FLEET_STOP_S = 30.0  # s the agents get to drain when the stack stops (an idle worker's last poll: 20 s)


@dataclass(frozen=True)
class StackConfig:
    """Timing of the local control loop (shorter than a deployment's: 60 s epochs, 15 s lead)."""

    epoch_s: float = 10.0  # s between planning epochs
    activate_lead_s: float = 4.0  # s: the earliest a version activates after publishing
    activate_max_lead_s: float = 30.0  # s: the latest, whether its slots are served or not
    check_s: float = 2.0  # s between backlog (and activation) checks between epochs
    rate_period_s: int = 5  # s: CloudWatch period of the observed rate
    emf_poll_s: float = 1.0  # s between reads of the front's EMF lines (CloudWatch's extraction, emulated)
    rate_lag_s: float = 2.5  # s the rate window ends before now: the front's last bucket is flushed
    hook_timeout_s: float = 60.0  # s a draining instance is given before it is killed
    agent_poll_s: float = 1.0  # s between an agent's reads of the plan pointer
    lifecycle_poll_s: float = 2.0  # s between an agent's IMDS reads (Spot notice: 120 s ahead)
    retire_grace_s: float = 2.0  # s old shares keep serving after a version activates
    max_instances: int = 16  # per hardware group (each instance is an agent process on this host)
    timer: bool = True  # False: epochs (and checks) run only when called, e.g. by a fault-injection test
    # s a request's items and the metric data points are kept (results' expires_at, moto's sweep): moto
    # holds everything in memory, about 110 KB per traffic frame, so a long run needs a bound
    retention_s: float = 3600.0
    # before its first claim an instance measures the models planned on its class (workers/onsite.py):
    # "all" here, so the real CPU class, whose profiles were measured by `models build` on this host
    # rather than on an instance, is measured on its instance too (issue #27); "off" to skip
    onsite_profiles: str = "all"
    onsite_budget_s: float = 30.0  # s the sweep may start models in (it runs before the first claim)


@dataclass
class StackInfo:
    url: str
    api_key: str
    apps: list[str]
    endpoint_url: str
    deployments: dict[str, Deployment]
    plans: dict[str, LocalPlan]
    log_dir: str
    version: int
    groups: dict[str, str] = field(default_factory=dict)  # hardware -> Auto Scaling group
    dlqs: dict[str, str] = field(default_factory=dict)
    region: str = "us-east-1"  # region of the local AWS resources (moto at endpoint_url)

    def as_json(self) -> dict[str, Any]:
        """What ``skinflint up --json`` prints: the front, its key, the apps and the local AWS
        endpoint (moto) with its region, for programs that inspect the tables, queues and bucket."""
        return {
            "url": self.url,
            "api_key": self.api_key,
            "apps": self.apps,
            "aws_endpoint": self.endpoint_url,
            "region": self.region,
        }


class LocalStack:
    """moto + registry + control loop + fleet emulator + front. ``plan_fn(app, overhead_s)`` plans
    an app for this machine (which hardware, which profiles, what is emulated)."""

    def __init__(
        self,
        apps: list[str],
        plan_fn: Callable[[str, float], LocalPlan],
        *,
        log: Callable[[str], None] = lambda _msg: None,
        log_dir: str | None = None,
        ready_timeout_s: float = 120.0,
        config: StackConfig | None = None,
    ):
        self.apps = apps
        self._plan_fn = plan_fn
        self._log = log
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="skinflint-stack-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._ready_timeout_s = ready_timeout_s
        self.config = config or StackConfig()
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.info: StackInfo | None = None
        self.epochs: list[dict[str, Any]] = []  # every epoch's summary (EpochSummary.as_json + "at")
        self.controller: Controller | None = None
        self.plan_store: PlanStore | None = None
        self.fleet: FleetEmulator | None = None
        self._imds: LocalImds | None = None
        self._emf: EmfExtractor | None = None
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._epoch_lock = threading.Lock()
        self._front_url = ""

    # -- process helpers ---------------------------------------------------------------------------
    def _env(self, cfg: DataPlaneConfig | None = None) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AWS_", "SKINFLINT_ENDPOINT"))
        }
        env.update(FAKE_CREDENTIALS)
        env["PYTHONUNBUFFERED"] = "1"
        if cfg is not None:
            env.update(cfg.to_env())
        return env

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start a child in its own session (a Ctrl-C reaches only this process, which stops the
        children in order: :meth:`stop`), naming this process its parent: the child stops itself if
        this one dies without stopping it (:mod:`workers.lifeline`)."""
        log_path = self.log_dir / f"{name}.log"
        fh = log_path.open("wb")
        env = {**env, CALLER_ENV: name}  # the meter counts each process's requests (moto_server.caller)
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env=child_env(env), start_new_session=True
        )
        fh.close()
        self._procs.append((name, proc, log_path))
        return proc

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> StackInfo:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> StackInfo:
        t0 = time.time()
        port = free_port()
        cmd = [sys.executable, "-m", "skinflint.local.moto_server", "-H", "127.0.0.1", "-p", str(port)]
        if os.environ.get("SKINFLINT_MOTO_PLAIN_GC", "").lower() in ("1", "on", "true", "yes"):
            cmd.append("--plain-gc")  # the collector as Python sets it (moto_server.frozen_full_collections)
        # moto deletes the items past their TTL (expires_at, set from the retention below) and drops
        # metric data points as old (moto_server.retention_sweeper)
        retention = float(self.config.retention_s)
        cmd += ["--metric-retention-s", repr(retention), "--sweep-s", repr(min(30.0, retention / 4))]
        moto = self._spawn("moto", cmd, self._env())
        endpoint = f"http://127.0.0.1:{port}"
        _wait_http(f"{endpoint}/moto-api/", 30, moto, "moto server", self.log_dir / "moto.log")
        self._log(f"moto server on {endpoint} ({time.time() - t0:.1f} s)")
        cfg = DataPlaneConfig(endpoint_url=endpoint, results_retention_days=self.config.retention_s / 86_400)
        os.environ.update({key: value for key, value in FAKE_CREDENTIALS.items() if key not in os.environ})
        # this process's clients (the control loop, the fleet emulator, the demo's reads) are "stack"
        # in the request meter; each child names itself (_spawn, the fleet's launcher)
        os.environ.setdefault(CALLER_ENV, "stack")
        clients = {
            service: make_client(service, cfg)
            for service in ("dynamodb", "sqs", "s3", "cloudwatch", "autoscaling", "ec2")
        }
        create_base(clients["dynamodb"], clients["s3"], cfg)
        api_key = "sk-local-" + secrets.token_urlsafe(18)
        ConfigStore(clients["dynamodb"], cfg.config_table).put_api_key(api_key, "local stack")

        # an idle probe misses what deliveries take under load (in the demo: p99 35-56 ms against 14-20 ms
        # idle), so the hop is never planned below the control loop's cold-start default; once enough
        # deliveries are measured, the epoch plans each module with their p99 (control/hops.py)
        overhead = max(self._hop_overhead(clients, endpoint), ControlConfig().hop_overhead_s)
        plans = {app: self._plan_fn(app, overhead) for app in self.apps}
        groups = self._control_plane(cfg, clients, plans, overhead)
        manifest = self._first_epoch(max(lp.overhead_s for lp in plans.values()))
        self._start_front(cfg)
        self._start_fleet(cfg, clients, groups)
        self._wait_serving(manifest, t0)
        self._freeze_moto(endpoint)
        if self.config.timer:
            self._timer = threading.Thread(target=self._epoch_loop, name="epoch-timer", daemon=True)
            self._timer.start()
        assert self.plan_store is not None
        deployments = self.plan_store.deployments(manifest.version)
        self.info = StackInfo(
            url=self._front_url,
            api_key=api_key,
            apps=list(self.apps),
            endpoint_url=endpoint,
            deployments=deployments,
            plans=plans,
            log_dir=str(self.log_dir),
            version=manifest.version,
            groups=groups,
            dlqs=self._dlqs(clients["sqs"], endpoint),
            region=cfg.region,
        )
        return self.info

    def _control_plane(
        self, cfg: DataPlaneConfig, clients: dict[str, Any], plans: dict[str, LocalPlan], delivery_s: float
    ) -> dict[str, str]:
        """Register the apps, create the hardware groups, build the controller. ``delivery_s``: the
        hop's delivery (the probe); the rest of each plan's hop is the worker's own time per batch
        (grace, decode), which a measured delivery p99 does not replace (``batch_overhead_s``)."""
        # the control plane (the planner, numpy) loads when a stack starts: the CLI imports this module
        # for FAKE_CREDENTIALS alone (skinflint report, apps)
        from control.service import Registrar, build_controller, load_catalog, registry_and_state

        ddb, s3 = clients["dynamodb"], clients["s3"]
        catalog = load_catalog(s3, cfg.bucket)
        hop = max(lp.overhead_s for lp in plans.values())
        hardware = sorted({hw for lp in plans.values() for hw in lp.problem.hardware})
        groups = create_groups(
            clients["autoscaling"],
            clients["ec2"],
            catalog,
            hardware,
            max_size=self.config.max_instances,
            hook_timeout_s=int(self.config.hook_timeout_s),
        )
        registry, states = registry_and_state(ddb, s3, cfg.config_table, cfg.bucket)
        registrar = Registrar(
            registry=registry,
            states=states,
            catalog=catalog,
            stored_profile=lambda _model: None,  # every profile is inline
            overhead_s=hop,
        )
        for lp in plans.values():
            registrar.register(registration_doc(lp))
        config = self.config
        control = ControlConfig(
            asg_names=groups,
            epoch_s=config.epoch_s,
            min_gap_s=0.8 * config.epoch_s,
            activate_lead_s=config.activate_lead_s,
            activate_max_lead_s=config.activate_max_lead_s,
            hop_overhead_s=delivery_s,
            batch_overhead_s=max(0.0, hop - delivery_s),
            rate_period_s=config.rate_period_s,
            rate_lag_s=config.rate_lag_s,
            stale_s=max(30.0, 3 * config.epoch_s),
            emulated_hardware=tuple(sorted({hw for lp in plans.values() for hw in lp.emulated_hardware})),
            machine_caps={hw: cap for lp in plans.values() for hw, cap in lp.machine_caps.items()},
            objective="all-in",  # as a deployment plans: fleet + data plane (control/objective.py)
        )
        self.controller = build_controller(cfg, control, clients=clients)
        self.plan_store = PlanStore(ddb, cfg.config_table)
        for lp in plans.values():
            self._log(
                f"{lp.app.name}: registered at {lp.frame_rate:g} frames/s on "
                f"{', '.join(lp.hardware_label(hw) for hw in sorted(lp.problem.hardware))}"
            )
        return groups

    def _start_front(self, cfg: DataPlaneConfig) -> None:
        front_port = free_port()
        # the front's and the instances' metrics as EMF lines, extracted into moto as CloudWatch
        # extracts the deployed ones' from their logs (skinflint/local/emf.py)
        emf_file = self.log_dir / "front.emf.jsonl"
        self._emf = EmfExtractor(
            str(self.log_dir / "*.emf.jsonl"),
            emulation_client(make_client("cloudwatch", cfg)),
            poll_s=self.config.emf_poll_s,
        )
        self._emf.start()
        front = self._spawn(
            "front",
            module_argv(  # python -m uvicorn ..., with the parent-death guard armed
                "uvicorn",
                [
                    "skinflint.local.front:app", "--host", "127.0.0.1", "--port", str(front_port),
                    "--log-level", "warning", "--no-access-log", "--no-server-header",
                ],
            ),
            {**self._env(cfg), "SKINFLINT_METRICS_SINK": "emf", "SKINFLINT_EMF_FILE": str(emf_file)},
        )  # fmt: skip
        self._front_url = f"http://127.0.0.1:{front_port}"
        _wait_http(f"{self._front_url}/healthz", 60, front, "front", self.log_dir / "front.log")

    def _start_fleet(self, cfg: DataPlaneConfig, clients: dict[str, Any], groups: dict[str, str]) -> None:
        config = self.config
        launcher = ProcessLauncher(
            self._env(cfg),
            self.log_dir,
            [
                "--poll-s", str(config.agent_poll_s),
                "--recheck-s", str(config.epoch_s),
                "--retire-grace-s", str(config.retire_grace_s),
                "--lifecycle-poll-s", str(config.lifecycle_poll_s),
                "--onsite-profiles", config.onsite_profiles,
                "--onsite-budget-s", str(config.onsite_budget_s),
            ],
            emf=True,
        )  # fmt: skip
        self._imds = LocalImds().start()
        store = self.plan_store
        assert store is not None

        def is_idle(iid: str) -> bool:
            beat = store.instances().get(iid)
            return beat is not None and beat.state == "idle"

        # the emulator plays Auto Scaling itself (launch, scale-in, terminate after the hook): its
        # own client, marked as AWS's stand-in, so the meter leaves its polls out of the components'
        # requests (the control loop's Auto Scaling calls stay counted, on clients["autoscaling"])
        self.fleet = FleetEmulator(
            emulation_client(make_client("autoscaling", cfg)),
            groups,
            launcher,
            self._imds,
            is_idle=is_idle,
            interval_s=1.0,
            hook_timeout_s=config.hook_timeout_s,
        )
        self.fleet.reconcile()
        self.fleet.start()

    # -- the control loop ----------------------------------------------------------------------------
    def run_epoch(self, reason: str = "local epoch timer") -> dict[str, Any]:
        """One planning epoch now (what the timer does every ``epoch_s``); returns its summary."""
        from control.service import handle_event  # the control plane: see _control_plane

        assert self.controller is not None
        with self._epoch_lock:
            out = handle_event(self.controller, {"detail-type": reason})
        out["at"] = time.time()
        self.epochs.append(out)
        self._log(_epoch_line(out))
        return out

    def check_backlog(self, reason: str = "local backlog timer") -> dict[str, Any]:
        """One backlog check now (what the timer does every ``check_s`` between epochs): activates
        a waiting version whose slots are served, corrects a late queue with an early epoch."""
        from control.service import BACKLOG_CHECK, handle_event  # the control plane: see _control_plane

        assert self.controller is not None
        with self._epoch_lock:
            out = handle_event(self.controller, {"source": BACKLOG_CHECK, "detail-type": reason})
        if out.get("epoch"):  # a correction ran an early epoch: it counts as one
            epoch = dict(out["epoch"]) | {"at": time.time()}
            self.epochs.append(epoch)
            self._log(f"backlog {out['status']} ({', '.join(out.get('late', []))}): {_epoch_line(epoch)}")
        elif out.get("activation", {}).get("status") in ("ready", "deadline"):
            activation = out["activation"]
            self._log(
                f"v{activation['version']} {activation['status']}: "
                f"{activation['ready']}/{activation['slots']} slot(s) served"
            )
        return out

    def _first_epoch(self, hop_s: float) -> Manifest:
        out = self.run_epoch("start")
        assert self.plan_store is not None
        manifest = self.plan_store.current()
        if manifest is None:
            raise StackError(f"the first planning epoch published nothing: {out.get('error') or out}")
        over = {hw: count for hw, count in manifest.counts.items() if count > self.config.max_instances}
        if over:
            need = ", ".join(f"{count} {hw}" for hw, count in sorted(over.items()))
            raise StackError(
                f"the plan needs {need} instances, more than this stack runs per hardware class "
                f"({self.config.max_instances}); the measured overhead per hop is {hop_s * 1e3:.0f} ms "
                "(a loaded host makes every batch slower): retry when the host is quieter, or lower --rate"
            )
        return manifest

    def _epoch_loop(self) -> None:
        """An epoch every ``epoch_s``; a backlog check every ``check_s`` in between."""
        config = self.config
        next_epoch = time.time() + config.epoch_s
        next_check = time.time() + config.check_s
        while not self._stop.wait(max(0.0, min(next_epoch, next_check) - time.time())):
            epoch = time.time() >= next_epoch
            try:
                if epoch:
                    next_epoch += config.epoch_s
                    self.run_epoch()
                else:
                    self.check_backlog()
            except Exception as exc:  # noqa: BLE001 - the timer outlives a failed epoch, as the schedule does
                log.exception("%s failed", "epoch" if epoch else "backlog check")
                self._log(f"{'epoch' if epoch else 'backlog check'} failed: {exc}")
            next_check = time.time() + config.check_s

    def _wait_serving(self, manifest: Manifest, t0: float) -> None:
        """Until every slot of ``manifest``'s fleet is claimed by a running instance serving it."""
        assert self.plan_store is not None and self.fleet is not None
        fleet = self.plan_store.fleet(manifest.version)
        slots = {str(instance.slot) for instance in fleet.instances} if fleet else set()
        end = time.time() + self._ready_timeout_s
        claims: dict[str, Any] = {}
        while time.time() < end:
            self._check_alive()
            claims = self.plan_store.claims(manifest.version)
            beats = self.plan_store.instances()
            serving = {
                slot
                for slot, claim in claims.items()
                if (beat := beats.get(claim.instance_id)) is not None
                and beat.state == "serving"
                and beat.version == manifest.version
            }
            if serving >= slots:
                instances = sum(len(self.fleet.running(hw)) for hw in self.fleet.groups)
                self._log(
                    f"{len(slots)} slot(s) of plan v{manifest.version} served by {instances} instance(s) "
                    f"({time.time() - t0:.1f} s since start)"
                )
                return
            time.sleep(0.2)
        missing = sorted(slots - set(claims))
        raise StackError(
            f"instances not serving after {self._ready_timeout_s:.0f} s: unclaimed slots "
            f"{', '.join(missing) or 'none'} (logs in {self.log_dir})"
        )

    def _check_alive(self) -> None:
        for name, proc, log_path in self._procs:
            if proc.poll() is not None:
                tail = (
                    log_path.read_text(errors="replace").strip().splitlines()[-1:]
                    if log_path.exists()
                    else []
                )
                raise StackError(
                    f"{name} exited with {proc.returncode}: {' '.join(tail)} (log: {log_path})", str(log_path)
                )
        assert self.fleet is not None
        for event in self.fleet.events:
            if event.kind == "restarted":
                path = self.log_dir / f"instance-{event.instance_id}.log"
                tail = path.read_text(errors="replace").strip().splitlines()[-1:] if path.exists() else []
                raise StackError(
                    f"instance agent {event.instance_id} died: {' '.join(tail)} (log: {path})", str(path)
                )

    def _dlqs(self, sqs: Any, endpoint: str) -> dict[str, str]:
        """Each app's dead-letter queue. It is created with the app's first queues, so an app the first
        epoch made none for has none yet and is left out; any other failure (moto failed or went
        away) is a :class:`StackError` naming the call, which stops the stack."""
        out: dict[str, str] = {}
        for app in self.apps:
            name = f"skinflint-{app}-dlq"
            try:
                out[app] = sqs.get_queue_url(QueueName=name)["QueueUrl"]
            except AWS_ERRORS as exc:
                if error_code(exc) in GONE_CODES:
                    continue
                raise StackError(f"GetQueueUrl {name} against moto ({endpoint}) failed: {exc}") from exc
        return out

    def _hop_overhead(self, clients: dict[str, Any], endpoint: str) -> float:
        """:meth:`_overhead` on the stack's clients. Any failure of its calls (moto failed or went away
        during the probe; each call's answer is needed) is a :class:`StackError`: one line, the stack
        stops."""
        try:
            return self._overhead(clients["sqs"], clients["dynamodb"])
        except AWS_ERRORS as exc:
            raise StackError(f"the hop probe against moto ({endpoint}) failed: {exc}") from exc

    def _overhead(self, sqs: Any, ddb: Any) -> float:
        """Measured per-hop overhead of this stack: one SQS send + long-poll receive of a task
        message the size of a real one (a demo frame inline, base64, plus the envelope), worst of
        ``OVERHEAD_PROBES`` (what each module hop adds to a batch's time). A worker forwards a
        batch's children before it writes its results and deletes its messages, so those requests
        are not in the hop; they are made here too (untimed), as a hop's load on the server."""
        from skinflint.local.video import synthetic_frames  # numpy, PIL: only when frames are drawn

        cfg = DataPlaneConfig()
        body = "x" * (len(base64.b64encode(synthetic_frames(1)[0])) + 600)
        queue_url = sqs.create_queue(QueueName="skinflint-calibration")["QueueUrl"]
        worst = 0.0
        for i in range(OVERHEAD_PROBES):
            sent_at = time.perf_counter()
            sqs.send_message_batch(QueueUrl=queue_url, Entries=[{"Id": "0", "MessageBody": body}])
            got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            worst = max(worst, time.perf_counter() - sent_at)
            ddb.put_item(
                TableName=cfg.results_table,
                Item={"pk": {"S": f"calibration-{i}"}, "sk": {"S": "x"}},
                ConditionExpression="attribute_not_exists(pk)",
            )
            for message in got.get("Messages", []):
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        sqs.delete_queue(QueueUrl=queue_url)
        return worst

    # -- what ran ------------------------------------------------------------------------------------
    def versions(self) -> list[int]:
        """Every plan version published while the stack ran, in order."""
        return sorted({int(epoch["version"]) for epoch in self.epochs if epoch.get("status") == "published"})

    def deployments(self, app: str) -> list[Deployment]:
        """The app's deployment in every version published while the stack ran (those still stored)."""
        assert self.plan_store is not None
        return [
            deployment
            for version in self.versions()
            if (deployment := self.plan_store.deployment(version, app)) is not None
        ]

    def aws_requests(self) -> dict[str, Any] | None:
        """moto's request counts by service and action since it started
        (:class:`skinflint.local.moto_server.RequestMeter`), or None when it cannot tell (not
        started, or moto's own server is running instead of the metered one)."""
        if self.info is None:
            return None
        try:
            with urllib.request.urlopen(self.info.endpoint_url + METER_PATH, timeout=5) as resp:
                got = json.loads(resp.read())
        except (OSError, ValueError):
            return None
        return got if isinstance(got, dict) and isinstance(got.get("by_action"), dict) else None

    def _freeze_moto(self, endpoint: str) -> None:
        """Ask moto's server for a full garbage collection and ``gc.freeze()`` now that the stack is
        up (``moto_server.FREEZE_PATH``): the objects setting it up created (the EC2 and Auto Scaling
        backends' data, tables, models) are then never walked by a collection while frames flow;
        before, the first collection of the stream took 108-136 ms. Best effort (moto's own server
        has no such path)."""
        req = urllib.request.Request(endpoint + FREEZE_PATH, data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                got = json.loads(resp.read())
            self._log(
                f"moto server: {got['collected']} objects collected, {got['frozen']} frozen "
                f"in {got['seconds']:.2f} s"
            )
        except (OSError, ValueError, KeyError) as exc:
            self._log(f"moto server: no freeze ({exc})")

    # -- stopping ------------------------------------------------------------------------------------
    def pid(self, name: str) -> int:
        """The process id of the stack's process ``name`` (``moto``, ``front``, an agent's name)."""
        for proc_name, proc, _ in self._procs:
            if proc_name == name:
                return int(proc.pid)
        raise StackError(f"no process {name!r} in the local stack")

    def add_api_key(self, key: str, note: str) -> None:
        """Register another API key with the front (its SHA-256 digest in the config table)."""
        if self.info is None:
            raise StackError("the local stack is not started")
        cfg = DataPlaneConfig(endpoint_url=self.info.endpoint_url)
        ConfigStore(make_client("dynamodb", cfg), cfg.config_table).put_api_key(key, note)

    def stop(self, timeout_s: float = 8.0) -> None:
        """Stop the epoch timer; drain every instance (SIGTERM; SIGKILL after ``FLEET_STOP_S``, or
        ``timeout_s`` if longer); SIGTERM the front, then moto; SIGKILL what is still alive after
        ``timeout_s``."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=30)
        if self.fleet is not None:
            # an agent's drain waits for its workers' receives in flight: up to 20 s (+3) for a
            # worker idle for 30 s, in SQS's longest poll (workers/worker.py)
            self.fleet.stop(timeout_s=max(timeout_s, FLEET_STOP_S))
        if self._imds is not None:
            self._imds.stop()
            self._imds = None
        order = [entry for entry in self._procs if entry[0] != "moto"] + [
            entry for entry in self._procs if entry[0] == "moto"
        ]
        for name, proc, _ in order:
            if name == "moto":
                self._reap([entry for entry in order if entry[0] != "moto"], timeout_s)
                self._stop_emf()  # the front has stopped: its last lines go in before moto stops
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        self._reap(order, timeout_s)
        self._stop_emf()
        self._procs.clear()

    def _stop_emf(self) -> None:
        emf, self._emf = self._emf, None
        if emf is None:
            return
        try:
            emf.stop()
        except Exception as exc:  # noqa: BLE001 - moto already gone: nothing left to put them into
            self._log(f"front metrics: the last EMF lines were not extracted ({exc})")
        if emf.invalid:
            self._log(f"front metrics: {emf.invalid} of {emf.lines} EMF lines were not valid EMF")

    @staticmethod
    def _reap(procs: list[tuple[str, subprocess.Popen[bytes], Path]], timeout_s: float) -> None:
        end = time.time() + timeout_s
        for _, proc, _ in procs:
            try:
                proc.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def __enter__(self) -> StackInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> list[str]:
        return [name for name, proc, _ in self._procs if proc.poll() is None]

    def pids(self) -> list[int]:
        """Every process this stack started and that may still run (moto, front, agents)."""
        out = [proc.pid for _, proc, _ in self._procs]
        if self.fleet is not None:
            out += [pid for group in self.fleet.snapshot().values() for pid in group["pids"].values()]
        return out


def _epoch_line(out: dict[str, Any]) -> str:
    parts = [f"epoch {out.get('epoch', '?')}: {out.get('status')}"]
    if out.get("version") is not None:
        parts.append(f"v{out['version']}")
    if out.get("rates"):
        parts.append(
            "rates "
            + ", ".join(
                f"{app} {rates['observed']:g}->{rates['planned']:g}/s"
                for app, rates in sorted(out["rates"].items())
            )
        )
    if out.get("counts"):
        parts.append("instances " + json.dumps(out["counts"], separators=(",", ":")))
    if out.get("scaled"):
        parts.append("scaled " + json.dumps(out["scaled"], separators=(",", ":")))
    if out.get("error"):
        parts.append(f"error: {out['error']}")
    return ", ".join(parts)
