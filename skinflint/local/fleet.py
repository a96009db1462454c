"""The local fleet emulator: Auto Scaling groups in moto, instance-agent processes on this machine.

One Auto Scaling group per hardware class (launch template with the class's EC2 instance type from
the hardware catalog; moto accepts any type, so the catalog is checked here), named as CDK names
them (``skinflint-workers-<class>``), with the drain lifecycle hook. The planner sets each group's
desired capacity (``SetDesiredCapacity``); :class:`FleetEmulator` honours it by starting one
``python -m workers.instance`` process per moto instance id and draining surplus ones.

moto's Auto Scaling has gaps, worked around here (moto 5.x):

- scale-in terminates at once and ignores lifecycle hooks (no ``Terminating:Wait``), and
  ``CompleteLifecycleAction`` is not implemented. So every instance is launched protected from
  scale-in (``NewInstancesProtectedFromScaleIn``): moto never removes one itself. The emulator
  picks the surplus instances (idle ones first, then the newest), marks them ``Terminating:Wait``
  in its fake IMDS (``autoscaling/target-lifecycle-state`` = ``Terminated``, as AWS does) and
  sends SIGTERM (the agent drains); when the process has exited (the lifecycle action is complete)
  or the hook's timeout passed (SIGKILL), it calls ``TerminateInstanceInAutoScalingGroup`` without
  decrementing the desired capacity.
- Spot interruptions do not exist in moto: :meth:`FleetEmulator.interrupt` posts a notice in the
  fake IMDS (``spot/instance-action``, two minutes ahead); the agent drains, the instance is
  terminated, and moto launches a replacement (the desired capacity is unchanged), which gets a
  new agent.

:class:`LocalImds` is that fake instance metadata service: one HTTP server on 127.0.0.1, every
instance under its own path prefix (``http://127.0.0.1:P/<instance id>``), IMDSv2 tokens enforced.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from core.adapters._aws import AWS_ERRORS
from core.errors import ConfigError
from skinflint.local.moto_server import CALLER_ENV
from workers.lifeline import child_env

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

__all__ = [
    "ASG_NAME_PREFIX",
    "DRAIN_HOOK_NAME",
    "FleetEmulator",
    "LocalImds",
    "ProcessLauncher",
    "asg_name",
    "create_groups",
]

log = logging.getLogger("skinflint.fleet")

ASG_NAME_PREFIX = "skinflint-workers-"  # cdk/constants.py ASG_NAME_PREFIX
DRAIN_HOOK_NAME = "skinflint-drain"  # cdk/constants.py DRAIN_HOOK_NAME
LOCAL_AMI = "ami-12c6146b"  # one of moto's built-in images
SPOT_NOTICE_S = 120.0


def asg_name(hardware: str) -> str:
    """The group of a hardware class, as the fleet stack names it (``c6i.large`` -> ``...c6i-large``)."""
    return ASG_NAME_PREFIX + re.sub(r"[^A-Za-z0-9-]", "-", hardware)


# -- fake IMDS -------------------------------------------------------------------------------------


@dataclass
class _ImdsInstance:
    target_state: str = "InService"
    spot_action: dict[str, str] | None = None
    tokens: set[str] = field(default_factory=set)


class LocalImds:
    """A fake EC2 instance metadata service (IMDSv2) for emulated instances."""

    def __init__(self) -> None:
        self._instances: dict[str, _ImdsInstance] = {}
        self._lock = threading.Lock()
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:  # quiet
                return

            def _answer(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                iid, path = imds._split(self.path)
                if iid is None or path != "latest/api/token":
                    self._answer(404)
                    return
                if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    self._answer(400, "missing TTL header")
                    return
                self._answer(200, imds._new_token(iid))

            def do_GET(self) -> None:
                iid, path = imds._split(self.path)
                if iid is None or not path.startswith("latest/meta-data/"):
                    self._answer(404)
                    return
                status, body = imds._read(iid, self.headers.get("X-aws-ec2-metadata-token"), path[17:])
                self._answer(status, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-imds", daemon=True)

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, instance_id: str) -> str:
        """What the agent on ``instance_id`` uses as its IMDS address (``--imds-url``)."""
        return f"{self.base}/{instance_id}"

    def start(self) -> LocalImds:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- state -------------------------------------------------------------------------------------
    def add(self, instance_id: str) -> None:
        with self._lock:
            self._instances.setdefault(instance_id, _ImdsInstance())

    def remove(self, instance_id: str) -> None:
        with self._lock:
            self._instances.pop(instance_id, None)

    def set_target_state(self, instance_id: str, state: str) -> None:
        """``autoscaling/target-lifecycle-state``: ``Terminated`` while held in Terminating:Wait."""
        with self._lock:
            self._instances.setdefault(instance_id, _ImdsInstance()).target_state = state

    def interrupt_spot(self, instance_id: str, at: float, action: str = "terminate") -> None:
        """Post a Spot interruption notice: ``spot/instance-action`` = {action, time} (UTC)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
        with self._lock:
            self._instances.setdefault(instance_id, _ImdsInstance()).spot_action = {
                "action": action,
                "time": stamp,
            }

    # -- request handling ---------------------------------------------------------------------------
    def _split(self, raw: str) -> tuple[str | None, str]:
        parts = raw.split("?", 1)[0].strip("/").split("/", 1)
        if len(parts) != 2:
            return None, ""
        with self._lock:
            known = parts[0] in self._instances
        return (parts[0] if known else None), parts[1]

    def _new_token(self, instance_id: str) -> str:
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._instances[instance_id].tokens.add(token)
        return token

    def _read(self, instance_id: str, token: str | None, path: str) -> tuple[int, str]:
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None:
                return 404, ""
            if not token or token not in inst.tokens:
                return 401, ""
            if path == "instance-id":
                return 200, instance_id
            if path == "autoscaling/target-lifecycle-state":
                return 200, inst.target_state
            if path == "spot/instance-action":
                return (200, json.dumps(inst.spot_action)) if inst.spot_action else (404, "")
        return 404, ""


# -- Auto Scaling groups in moto ----------------------------------------------------------------


def create_groups(
    asg: Any,
    ec2: Any,
    catalog: Mapping[str, Any],
    hardware: list[str],
    *,
    max_size: int = 10,
    hook_timeout_s: int = 60,
) -> dict[str, str]:
    """One launch template and Auto Scaling group (desired 0, protected instances, drain hook) per
    hardware class; returns hardware -> group name. A class missing from the catalog or without an
    EC2 instance type is refused (moto would accept anything)."""
    bad = [hw for hw in hardware if hw not in catalog]
    if bad:
        raise ConfigError(f"unknown hardware class {', '.join(bad)} (catalog: {', '.join(sorted(catalog))})")
    untyped = [hw for hw in hardware if not getattr(catalog[hw], "instance_type", None)]
    if untyped:
        raise ConfigError(f"hardware class {', '.join(untyped)} has no EC2 instance type to launch")
    out: dict[str, str] = {}
    try:
        for hw in hardware:
            name = asg_name(hw)
            template = f"skinflint-{name.removeprefix(ASG_NAME_PREFIX)}"
            ec2.create_launch_template(
                LaunchTemplateName=template,
                LaunchTemplateData={"ImageId": LOCAL_AMI, "InstanceType": catalog[hw].instance_type},
            )
            asg.create_auto_scaling_group(
                AutoScalingGroupName=name,
                LaunchTemplate={"LaunchTemplateName": template, "Version": "$Latest"},
                MinSize=0,
                MaxSize=max_size,
                DesiredCapacity=0,
                AvailabilityZones=["us-east-1a"],
                NewInstancesProtectedFromScaleIn=True,  # moto ignores the hook: the emulator scales in
                Tags=[{"Key": "skinflint:hardware", "Value": hw, "PropagateAtLaunch": True}],
            )
            asg.put_lifecycle_hook(
                LifecycleHookName=DRAIN_HOOK_NAME,
                AutoScalingGroupName=name,
                LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
                HeartbeatTimeout=hook_timeout_s,
                DefaultResult="CONTINUE",
            )
            out[hw] = name
    except AWS_ERRORS as exc:
        raise ConfigError(f"cannot create the Auto Scaling groups: {exc}") from exc
    return out


# -- agent processes ------------------------------------------------------------------------------


class Agent(Protocol):
    """A started instance agent (a process, or a thread in tests)."""

    pid: int

    def poll(self) -> int | None: ...

    def terminate(self) -> None:
        """SIGTERM: drain."""

    def kill(self) -> None: ...


class ProcessLauncher:
    """Starts ``python -m workers.instance`` for an instance, logging to ``<log_dir>/<id>.log``."""

    def __init__(
        self, env: dict[str, str], log_dir: Path, extra_args: list[str] | None = None, emf: bool = False
    ):
        self.env = env
        self.log_dir = log_dir
        self.extra_args = list(extra_args or [])
        self.emf = emf  # metrics as EMF lines to <log_dir>/instance-<id>.emf.jsonl, as on EC2 to its log

    def __call__(self, instance_id: str, hardware: str, imds_url: str) -> Agent:
        log_path = self.log_dir / f"instance-{instance_id}.log"
        argv = [
            sys.executable, "-m", "workers.instance", "--hardware", hardware,
            "--instance-id", instance_id, "--imds-url", imds_url, *self.extra_args,
        ]  # fmt: skip
        with log_path.open("ab") as fh:
            # its own session (a Ctrl-C reaches the stack only); this process named as its parent:
            # the agent drains and exits if this process dies (workers.lifeline)
            env = child_env(self._env(instance_id, hardware))
            proc = subprocess.Popen(
                argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return proc  # Popen has pid, poll(), terminate() (SIGTERM) and kill()

    def _env(self, instance_id: str, hardware: str) -> dict[str, str]:
        # the receipt journals (workers/receipts.py) in the stack's directory, as /var/lib on EC2; the
        # request meter counts the instance's requests as instance-<hardware> (moto_server.caller)
        env = {"SKINFLINT_STATE_DIR": str(self.log_dir / "state"), **self.env}
        env[CALLER_ENV] = f"instance-{hardware}"
        if not self.emf:
            return env
        emf_file = self.log_dir / f"instance-{instance_id}.emf.jsonl"
        return {**env, "SKINFLINT_METRICS_SINK": "emf", "SKINFLINT_EMF_FILE": str(emf_file)}


@dataclass
class _Instance:
    instance_id: str
    hardware: str
    group: str
    agent: Agent
    launched_at: float
    state: str = "running"  # running | terminating (scale-in) | interrupted (Spot)
    leave_by: float = 0.0  # hook timeout / Spot deadline: SIGKILL after this
    signalled_at: float = 0.0
    restarts: int = 0
    exit_code: int | None = None


@dataclass
class FleetEvent:
    at: float
    kind: str  # launched | scale-in | spot | terminated | restarted | killed
    instance_id: str
    hardware: str
    detail: str = ""


class FleetEmulator:
    """Honours the desired capacity of the hardware groups with agent processes (see the module
    doc). ``is_idle(instance_id)`` tells which instances serve no slot (preferred on scale-in)."""

    def __init__(
        self,
        asg: Any,
        groups: Mapping[str, str],
        launch: Callable[[str, str, str], Agent],
        imds: LocalImds,
        *,
        is_idle: Callable[[str], bool] = lambda _iid: False,
        interval_s: float = 0.5,
        hook_timeout_s: float = 60.0,
        max_restarts: int = 3,
        clock: Callable[[], float] = time.time,
    ):
        self._asg = asg
        self.groups = dict(groups)  # hardware -> group name
        self._launch = launch
        self.imds = imds
        self._is_idle = is_idle
        self.interval_s = interval_s
        self.hook_timeout_s = hook_timeout_s
        self.max_restarts = max_restarts
        self._clock = clock
        self._instances: dict[str, _Instance] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.events: list[FleetEvent] = []
        self.errors: list[str] = []

    # -- reading moto -----------------------------------------------------------------------------
    def _describe(self) -> dict[str, tuple[int, list[str]]]:
        """group name -> (desired capacity, instance ids)."""
        try:
            out = self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=list(self.groups.values()))
        except AWS_ERRORS as exc:
            raise ConfigError(f"cannot describe the Auto Scaling groups: {exc}") from exc
        return {
            group["AutoScalingGroupName"]: (
                int(group["DesiredCapacity"]),
                [inst["InstanceId"] for inst in group["Instances"]],
            )
            for group in out["AutoScalingGroups"]
        }

    def _event(self, kind: str, inst: _Instance, detail: str = "") -> None:
        self.events.append(FleetEvent(self._clock(), kind, inst.instance_id, inst.hardware, detail))
        log.info("%s %s (%s) %s", kind, inst.instance_id, inst.hardware, detail)

    # -- one reconciliation pass ---------------------------------------------------------------------
    def reconcile(self) -> None:
        """Start agents for new instances, finish leaving ones, restart crashed ones, scale in."""
        with self._lock:
            described = self._describe()
            for hw, name in self.groups.items():
                desired, ids = described.get(name, (0, []))
                for iid in ids:
                    if iid not in self._instances:
                        self._start(iid, hw, name)
                for inst in [inst for inst in self._instances.values() if inst.group == name]:
                    if inst.instance_id not in ids:  # terminated behind our back: stop its agent
                        self._forget(inst, "gone from the group")
                    else:
                        self._check(inst)
                self._scale_in(name, desired)

    def _start(self, iid: str, hw: str, group: str) -> None:
        self.imds.add(iid)
        inst = _Instance(iid, hw, group, self._launch(iid, hw, self.imds.url(iid)), self._clock())
        self._instances[iid] = inst
        self._event("launched", inst, f"pid {inst.agent.pid}")

    def _check(self, inst: _Instance) -> None:
        code = inst.agent.poll()
        now = self._clock()
        if inst.state == "running":
            if code is None:
                return
            if code == 0 or inst.restarts >= self.max_restarts:  # it drained on its own, or keeps dying
                self._terminate(inst, f"agent exited with {code} while in service")
                return
            inst.restarts += 1  # systemd's Restart=on-failure
            inst.agent = self._launch(inst.instance_id, inst.hardware, self.imds.url(inst.instance_id))
            self._event("restarted", inst, f"exit {code}, restart {inst.restarts}")
            return
        if code is None and now >= inst.leave_by:
            inst.agent.kill()
            self._event("killed", inst, f"still draining after {now - inst.signalled_at:.0f} s")
            code = -9
        if code is not None:
            inst.exit_code = code
            self._terminate(inst, f"drained in {now - inst.signalled_at:.2f} s (exit {code})")

    def _terminate(self, inst: _Instance, detail: str) -> None:
        try:
            self._asg.terminate_instance_in_auto_scaling_group(
                InstanceId=inst.instance_id, ShouldDecrementDesiredCapacity=False
            )
        except AWS_ERRORS as exc:
            self.errors.append(f"terminate {inst.instance_id}: {exc}")
            log.warning("cannot terminate %s: %s", inst.instance_id, exc)
            return
        self._instances.pop(inst.instance_id, None)
        self.imds.remove(inst.instance_id)
        self._event("terminated", inst, detail)

    def _forget(self, inst: _Instance, detail: str) -> None:
        if inst.agent.poll() is None:
            inst.agent.terminate()
        self._instances.pop(inst.instance_id, None)
        self.imds.remove(inst.instance_id)
        self._event("terminated", inst, detail)

    def _scale_in(self, group: str, desired: int) -> None:
        running = [
            inst for inst in self._instances.values() if inst.group == group and inst.state == "running"
        ]
        excess = len(running) - desired
        if excess <= 0:
            return
        # AWS picks by its termination policy; here idle instances go first (no slot to hand over),
        # then the newest (the older ones have their models loaded and their slots claimed)
        running.sort(key=lambda inst: (not self._is_idle(inst.instance_id), -inst.launched_at))
        now = self._clock()
        for inst in running[:excess]:
            inst.state = "terminating"
            inst.signalled_at = now
            inst.leave_by = now + self.hook_timeout_s
            self.imds.set_target_state(inst.instance_id, "Terminated")  # Terminating:Wait
            inst.agent.terminate()
            self._event("scale-in", inst, f"desired {desired}")

    # -- faults ---------------------------------------------------------------------------------------
    def interrupt(self, instance_id: str, notice_s: float = SPOT_NOTICE_S) -> None:
        """A Spot interruption notice for ``instance_id``: reclaimed ``notice_s`` from now."""
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None:
                raise ConfigError(f"no emulated instance {instance_id!r}")
            now = self._clock()
            inst.state = "interrupted"
            inst.signalled_at = now
            inst.leave_by = now + notice_s
            self.imds.interrupt_spot(instance_id, now + notice_s)
            self._event("spot", inst, f"reclaimed in {notice_s:.0f} s")

    # -- status and the background loop ---------------------------------------------------------------
    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Per hardware: desired capacity, instances by state, their agents' pids."""
        with self._lock:
            described = self._describe()
            out: dict[str, dict[str, Any]] = {}
            for hw, name in self.groups.items():
                desired, _ids = described.get(name, (0, []))
                insts = [inst for inst in self._instances.values() if inst.group == name]
                out[hw] = {
                    "group": name,
                    "desired": desired,
                    "running": sorted(inst.instance_id for inst in insts if inst.state == "running"),
                    "leaving": sorted(inst.instance_id for inst in insts if inst.state != "running"),
                    "pids": {inst.instance_id: inst.agent.pid for inst in insts},
                }
            return out

    def running(self, hardware: str | None = None) -> list[str]:
        with self._lock:
            return sorted(
                inst.instance_id
                for inst in self._instances.values()
                if inst.state == "running" and (hardware is None or inst.hardware == hardware)
            )

    def start(self) -> FleetEmulator:
        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                try:
                    self.reconcile()
                except Exception as exc:  # noqa: BLE001 - the loop must outlive a bad pass
                    self.errors.append(str(exc))
                    log.warning("fleet reconcile failed: %s", exc)

        self._thread = threading.Thread(target=loop, name="fleet-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop reconciling; SIGTERM every agent (each drains), SIGKILL what is left after
        ``timeout_s``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            agents = [inst.agent for inst in self._instances.values()]
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
        end = time.time() + timeout_s
        for agent in agents:
            while agent.poll() is None and time.time() < end:
                time.sleep(0.05)
            if agent.poll() is None:
                agent.kill()
