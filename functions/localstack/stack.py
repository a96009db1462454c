"""The local stack's processes: moto's server, the front (uvicorn), one worker per planned machine.

:class:`LocalStack` is a context manager; ``skinflint up`` and ``skinflint demo`` both use it. It
starts and stops only its own child processes (by pid)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from functions.errors import DataPlaneError
from functions.settings import DataPlaneConfig, make_client

if TYPE_CHECKING:
    from collections.abc import Callable

    from functions.localstack.planning import LocalPlan
    from functions.schema import Assignment, Deployment

__all__ = ["LocalStack", "StackError", "StackInfo", "free_port"]

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "skinflint-local",
    "AWS_SECRET_ACCESS_KEY": "skinflint-local",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class StackError(DataPlaneError):
    """A process of the local stack did not start or died; ``log`` names its log file."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@dataclass
class StackInfo:
    url: str
    api_key: str
    apps: list[str]
    endpoint_url: str
    deployments: dict[str, Deployment]
    assignments: list[Assignment]
    plans: dict[str, LocalPlan]
    log_dir: str
    dlqs: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"url": self.url, "api_key": self.api_key, "apps": self.apps}


class LocalStack:
    """moto + resources + plan + front + workers. ``plan_fn(app) -> LocalPlan`` decides what runs."""

    def __init__(
        self,
        apps: list[str],
        plan_fn: Callable[[str, float], LocalPlan],
        *,
        log: Callable[[str], None] = lambda _msg: None,
        log_dir: str | None = None,
        ready_timeout_s: float = 120.0,
    ):
        self.apps = apps
        self._plan_fn = plan_fn
        self._log = log
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="skinflint-stack-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._ready_timeout_s = ready_timeout_s
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.info: StackInfo | None = None

    # -- process helpers ---------------------------------------------------------------------------
    def _env(self, cfg: DataPlaneConfig | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SKINFLINT_ENDPOINT"))}
        env.update(FAKE_CREDENTIALS)
        env["PYTHONUNBUFFERED"] = "1"
        if cfg is not None:
            env.update(cfg.to_env())
        return env

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}.log"
        fh = log.open("wb")
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        fh.close()
        self._procs.append((name, proc, log))
        return proc

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> StackInfo:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> StackInfo:
        from functions.adapters.config_store import ConfigStore
        from functions.localstack.provision import create_base, deploy

        t0 = time.time()
        port = free_port()
        moto = self._spawn(
            "moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], self._env()
        )
        endpoint = f"http://127.0.0.1:{port}"
        _wait_http(f"{endpoint}/moto-api/", 30, moto, "moto server", self.log_dir / "moto.log")
        self._log(f"moto server on {endpoint} ({time.time() - t0:.1f} s)")
        cfg = DataPlaneConfig(endpoint_url=endpoint)
        os.environ.update({k: v for k, v in FAKE_CREDENTIALS.items() if k not in os.environ})
        ddb, sqs, s3 = (make_client(s, cfg) for s in ("dynamodb", "sqs", "s3"))
        create_base(ddb, s3, cfg)
        store = ConfigStore(ddb, cfg.config_table)
        api_key = "sk-local-" + secrets.token_urlsafe(18)
        store.put_api_key(api_key, "local stack")

        deployments: dict[str, Deployment] = {}
        assignments: list[Assignment] = []
        plans: dict[str, LocalPlan] = {}
        dlqs: dict[str, str] = {}
        for app in self.apps:
            lp = self._plan_fn(app, self._overhead(sqs, ddb))
            plans[app] = lp
            dep, asg, dlq = deploy(
                store,
                sqs,
                lp.app,
                lp.plan,
                lp.frame_rate,
                slo_s=lp.slo_s,
                emulated_hardware=lp.emulated_hardware,
                model_path=lp.model_path,
                overhead_s=lp.overhead_s,
                threads=lp.threads,
            )
            deployments[app], dlqs[app] = dep, dlq
            assignments += asg
            machines = sum(g.machines for m in lp.plan.modules.values() for g in m.groups)
            self._log(
                f"{app}: planned {machines} machine(s) "
                f"at {lp.frame_rate:g} frames/s, billed ${lp.plan.billed_per_hour:.3f}/h"
            )

        env = self._env(cfg)
        front_port = free_port()
        front = self._spawn(
            "front",
            [
                sys.executable, "-m", "uvicorn", "functions.front.local:app",
                "--host", "127.0.0.1", "--port", str(front_port), "--log-level", "warning", "--no-access-log",
            ],
            env,
        )  # fmt: skip
        for a in assignments:
            self._spawn(
                f"worker-{a.worker_id}",
                [sys.executable, "-m", "gpu_fleet.worker", "--worker-id", a.worker_id],
                env,
            )
        url = f"http://127.0.0.1:{front_port}"
        _wait_http(f"{url}/healthz", 60, front, "front", self.log_dir / "front.log")
        self._wait_workers(store, [a.worker_id for a in assignments])
        self._log(f"{len(assignments)} worker(s) ready ({time.time() - t0:.1f} s since start)")
        self.info = StackInfo(
            url=url,
            api_key=api_key,
            apps=list(self.apps),
            endpoint_url=endpoint,
            deployments=deployments,
            assignments=assignments,
            plans=plans,
            log_dir=str(self.log_dir),
            dlqs=dlqs,
        )
        return self.info

    def _overhead(self, sqs: Any, ddb: Any) -> float:
        """Measured per-hop overhead of this stack: one SQS send + receive + a conditional
        DynamoDB transaction + delete, worst of 8 (what each module hop adds to a batch's time)."""
        from functions.settings import DataPlaneConfig as _Cfg

        cfg = _Cfg()
        q = sqs.create_queue(QueueName="skinflint-calibration")["QueueUrl"]
        worst = 0.0
        for i in range(8):
            t = time.perf_counter()
            sqs.send_message_batch(QueueUrl=q, Entries=[{"Id": "0", "MessageBody": "x" * 4000}])
            got = sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            ddb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": cfg.results_table,
                            "Item": {"pk": {"S": f"calibration-{i}"}, "sk": {"S": "x"}},
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    }
                ]
            )
            for m in got.get("Messages", []):
                sqs.delete_message(QueueUrl=q, ReceiptHandle=m["ReceiptHandle"])
            worst = max(worst, time.perf_counter() - t)
        sqs.delete_queue(QueueUrl=q)
        return worst

    def _wait_workers(self, store: Any, ids: list[str]) -> None:
        end = time.time() + self._ready_timeout_s
        while time.time() < end:
            for name, proc, log in self._procs:
                if proc.poll() is not None:
                    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
                    raise StackError(
                        f"{name} exited with {proc.returncode}: {' '.join(tail)} (log: {log})", str(log)
                    )
            beats = store.heartbeats()
            if all(beats.get(i, {}).get("ready") for i in ids):
                return
            time.sleep(0.2)
        missing = [i for i in ids if not store.heartbeats().get(i, {}).get("ready")]
        raise StackError(f"workers not ready after {self._ready_timeout_s:.0f} s: {', '.join(missing)}")

    def stop(self, timeout_s: float = 8.0) -> None:
        """SIGTERM every process this stack started (workers first, moto last), then SIGKILL what
        is still alive after ``timeout_s``."""
        order = [p for p in self._procs if p[0] != "moto"] + [p for p in self._procs if p[0] == "moto"]
        for name, proc, _ in order:
            if name == "moto":
                self._reap([p for p in order if p[0] != "moto"], timeout_s)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        self._reap(order, timeout_s)
        self._procs.clear()

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
