"""The workers' boot script, run: the user data that cdk/userdata.py generates, executed by bash
against a stubbed system (fake ``dnf``, ``curl``, ``aws``, ``unzip``, ``python3.12``, ``systemctl``
... on PATH, the file system under a temporary root). Every failure path completes the launch
lifecycle action with ABANDON, logs ``SKINFLINT_BOOT_FAILED`` and never starts the agent; a good
boot starts it and completes with CONTINUE. The boot check is the agent's own
(``python -m workers.instance --boot-check``, run for real): on this machine's CPU-only onnxruntime a
GPU class fails it, a CPU class passes.

Also the agent's check itself (:func:`workers.instance.boot_problem`) with a stand-in onnxruntime."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import sys
import types
from typing import TYPE_CHECKING, Any

import pytest

from cdk import constants as C
from cdk.userdata import BOOT_FAILED_MARK, WorkerBoot, worker_boot_commands, worker_boot_prelude

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.infra

INSTANCE = "i-0123456789abcdef0"
_LOG = 'echo "$(basename "$0") $*" >> "$STUB_LOG"'
_FAILS = '[ "${STUB_FAIL:-}" = "$(basename "$0")" ] && { echo "$(basename "$0"): stub failure" >&2; exit 1; }'
STUBS = {
    "dnf": "",
    "id": "exit 1",  # no such user yet
    "useradd": "",
    "systemctl": "",
    "aws": "",
    # IMDS: a token, then the instance id
    "curl": f'case "$*" in *instance-id*) echo {INSTANCE};; *) echo token;; esac',
    # install -d [-m MODE] [-o OWNER] DIR...: the directories only
    "install": 'while [ $# -gt 0 ]; do case "$1" in -d) ;; -m|-o) shift;; *) mkdir -p "$1";; esac; shift; done',
    # unzip -q -o ZIP -d DIR: the archive must exist (a failed download leaves none)
    "unzip": 'test -f "$3" || { echo "unzip: cannot find $3" >&2; exit 9; }; mkdir -p "$5"',
    # python3.12 -m venv DIR: a venv whose pip is a stub and whose python runs the real boot check
    "python3.12": 'mkdir -p "$3/bin" && cp "$STUB_BIN/venv-pip" "$3/bin/pip" && '
    'cp "$STUB_BIN/venv-python" "$3/bin/python"',
    "venv-pip": "",
    "venv-python": 'export PYTHONPATH="$REPO"; exec "$REAL_PYTHON" "$@"',
    "amazon-cloudwatch-agent-ctl": "",
}


def _script(boot: WorkerBoot, root: Path) -> str:
    prelude = worker_boot_prelude(boot.hardware, boot.region, boot.asg_name)
    body = "\n".join(["#!/bin/bash", *prelude, *worker_boot_commands(boot)])
    # the instance's paths under the temporary root
    return re.sub(r"(?<![\w/.:-])/(opt|etc|var/log|usr/local)/", lambda m: f"{root}/{m.group(1)}/", body)


def _stubs(bin_dir: Path) -> None:
    bin_dir.mkdir()
    for name, body in STUBS.items():
        path = bin_dir / name
        lines = ["#!/bin/bash", _LOG, _FAILS, body or "true"]
        if name == "venv-python":  # logs as "python", fails with STUB_FAIL=python
            lines = ["#!/bin/bash", _LOG.replace('$(basename "$0")', "python"), body]
        path.write_text("\n".join(lines) + "\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)


def boot(
    tmp_path: Path,
    kind: str = "cpu",
    fail: str = "",
    wheels: bool = True,
    cuda: bool = True,
    downloads: bool = True,
) -> tuple[int, str, str]:
    """Run the boot script of a ``kind`` class; returns (exit status, the stubs' calls, its output)."""
    root = tmp_path / "root"
    root.mkdir()
    _stubs(tmp_path / "bin")
    (root / "var" / "log").mkdir(parents=True)
    agent = root / "opt" / "aws" / "amazon-cloudwatch-agent"
    (agent / "bin").mkdir(parents=True)
    (agent / "etc").mkdir()
    shutil.copy(tmp_path / "bin" / "amazon-cloudwatch-agent-ctl", agent / "bin")
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "logrotate.d").mkdir()
    if cuda:
        (root / "usr" / "local" / "cuda-12.8" / "lib64").mkdir(parents=True)
    archives = tmp_path / "dl"
    archives.mkdir()
    for name in ("code.zip", "wheels.zip"):
        if downloads:
            (archives / name).write_bytes(b"zip")
    hardware = "t4" if kind == "gpu" else "c6i.large"
    spec = WorkerBoot(
        hardware=hardware,
        kind=kind,
        region="us-east-1",
        asg_name=f"{C.ASG_NAME_PREFIX}{hardware.replace('.', '-')}",
        code_zip=str(archives / "code.zip"),
        wheels_zip=str(archives / "wheels.zip") if wheels else None,
        models_zip=None,
        config_table="skinflint-config",
        results_table="skinflint-results",
        bucket="skinflint-frames-123456789012-us-east-1",
    )
    script = tmp_path / "user-data.sh"
    script.write_text(_script(spec, root))
    log = tmp_path / "calls.log"
    log.touch()
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "STUB_LOG": str(log),
        "STUB_BIN": str(tmp_path / "bin"),
        "STUB_FAIL": fail,
        "REPO": str(C.REPO_ROOT),
        "REAL_PYTHON": sys.executable,
    }
    proc = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return proc.returncode, log.read_text(), proc.stdout + proc.stderr


def _completed(calls: str) -> list[str]:
    return re.findall(r"aws autoscaling complete-lifecycle-action .*--lifecycle-action-result (\w+)", calls)


def test_a_good_cpu_boot_starts_the_agent_and_goes_in_service(tmp_path: Path) -> None:
    code, calls, out = boot(tmp_path, "cpu")
    assert code == 0, out
    assert "boot check passed (c6i.large)" in out
    assert "systemctl enable --now skinflint-worker.service" in calls
    assert "pip install --no-index --find-links" in calls
    assert _completed(calls) == ["CONTINUE"]
    assert f"--lifecycle-hook-name {C.BOOT_HOOK_NAME}" in calls and f"--instance-id {INSTANCE}" in calls
    assert BOOT_FAILED_MARK not in calls + out


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"fail": "dnf"}, "dnf install -y python3.12"),
        ({"downloads": False}, "unzip -q -o"),  # the archives' download failed
        ({"fail": "pip"}, "pip install --no-index"),  # a wheel missing from the wheelhouse
        ({"wheels": False}, "no cpu wheelhouse shipped"),
        # this machine's onnxruntime has no CUDA provider: the agent's check fails the GPU class
        ({"kind": "gpu"}, "workers.instance --hardware t4"),
        ({"kind": "gpu", "cuda": False}, "no CUDA 12 toolkit"),
        ({"fail": "systemctl"}, "systemctl"),
    ],
)
def test_every_boot_failure_abandons_and_is_logged(
    tmp_path: Path, kwargs: dict[str, Any], reason: str
) -> None:
    code, calls, out = boot(tmp_path, **kwargs)
    assert code != 0
    assert _completed(calls) == ["ABANDON"], calls
    assert "systemctl enable --now skinflint-worker.service" not in calls  # the agent never starts
    marked = [line for line in out.splitlines() if line.startswith(BOOT_FAILED_MARK)]
    assert len(marked) == 1 and reason in marked[0], (marked, out)
    # the alarm's log line reaches the worker log group, in the instance's boot stream
    assert f"aws logs put-log-events --log-group-name {C.WORKER_LOG_GROUP}" in calls
    assert f"boot/{INSTANCE}" in calls and BOOT_FAILED_MARK in calls


def test_the_gpu_boot_check_names_the_missing_provider(tmp_path: Path) -> None:
    code, _, out = boot(tmp_path, "gpu")
    assert code != 0
    assert "boot check failed (t4): CUDAExecutionProvider is not in this onnxruntime build" in out


def test_the_gpu_boot_points_the_agent_at_the_amis_cuda(tmp_path: Path) -> None:
    boot(tmp_path, "gpu")
    env = (tmp_path / "root" / "etc" / "skinflint" / "worker.env").read_text()
    assert f"LD_LIBRARY_PATH={tmp_path}/root/usr/local/cuda-12.8/lib64:" in env
    assert "SKINFLINT_REQUIRE_PROVIDER=CUDAExecutionProvider" in env


# -- the agent's check ----------------------------------------------------------------------------
class _Ort(types.ModuleType):
    def __init__(self, providers: list[str], path: str):
        super().__init__("onnxruntime")
        self.__file__ = path
        self._providers = providers

    def get_available_providers(self) -> list[str]:
        return self._providers


def _smi(rc: int, out: str) -> Any:
    def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        assert cmd == ["nvidia-smi", "-L"]
        return subprocess.CompletedProcess(cmd, rc, out, "NVIDIA-SMI has failed" if rc else "")

    return run


def _load_ok(path: str, mode: int = 0) -> None:
    return None


def _load_missing_cudnn(path: str, mode: int = 0) -> None:
    if path.endswith("providers_cuda.so"):
        raise OSError("libcudnn.so.9: cannot open shared object file: No such file or directory")


GPU_LINE = "GPU 0: Tesla T4 (UUID: GPU-1)"
CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


@pytest.mark.parametrize(
    ("providers", "run", "load", "want"),
    [
        (CUDA, _smi(0, GPU_LINE), _load_ok, None),
        (["CPUExecutionProvider"], _smi(0, GPU_LINE), _load_ok, "not in this onnxruntime build"),
        (CUDA, _smi(9, ""), _load_ok, "no GPU visible: nvidia-smi -L: NVIDIA-SMI has failed"),
        (CUDA, _smi(0, "No devices found."), _load_ok, "no GPU visible"),
        (CUDA, _smi(0, GPU_LINE), _load_missing_cudnn, "CUDAExecutionProvider does not load: libcudnn.so.9"),
    ],
)
def test_boot_problem(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    providers: list[str],
    run: Any,
    load: Any,
    want: str | None,
) -> None:
    from workers.instance import boot_problem

    monkeypatch.setitem(sys.modules, "onnxruntime", _Ort(providers, str(tmp_path / "__init__.py")))
    got = boot_problem("CUDAExecutionProvider", run=run, load=load)
    assert (got is None) if want is None else (got is not None and want in got), got


def test_no_required_provider_is_no_check() -> None:
    from workers.instance import boot_problem

    assert boot_problem(None) is None  # the local stack: no SKINFLINT_REQUIRE_PROVIDER


def test_a_failed_check_claims_nothing_and_marks_the_instance_unhealthy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from workers import instance

    marked: list[str] = []
    monkeypatch.setattr(instance, "_mark_unhealthy", marked.append)
    monkeypatch.setattr(instance, "build_agent", lambda *_: pytest.fail("the agent must not start"))
    monkeypatch.setitem(sys.modules, "onnxruntime", _Ort(["CPUExecutionProvider"], "/x/__init__.py"))
    for key, value in {
        "SKINFLINT_REQUIRE_PROVIDER": "CUDAExecutionProvider",
        "SKINFLINT_ASG_NAME": "skinflint-workers-t4",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    assert instance.main(["--hardware", "t4", "--instance-id", INSTANCE]) == instance.BOOT_CHECK_EXIT
    assert marked == [INSTANCE]
    assert instance.BOOT_CHECK_EXIT == C.BOOT_CHECK_EXIT  # systemd's RestartPreventExitStatus


def test_the_unit_does_not_restart_a_failed_check() -> None:
    boot_spec = WorkerBoot("t4", "gpu", "us-east-1", "g", "/c.zip", "/w.zip", None, "c", "r", "b")
    assert f"RestartPreventExitStatus={C.BOOT_CHECK_EXIT}" in worker_boot_commands(boot_spec)
