"""The workers' wheelhouses: ``python -m cdk.deps worker`` builds one per hardware kind for the
instances' CPython and glibc, complete enough to install with ``pip install --no-index``; a
requirement without a wheel for that platform fails the build with one line.

``test_builds_both_kinds_from_the_package_index`` downloads from the package index (about 400 MB,
CI reaches it: it installs the project from there); the others need no network."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from cdk import constants as C
from cdk.deps import (
    MANIFEST,
    PLATFORMS,
    WheelhouseError,
    build_wheelhouse,
    main,
    offline_install_command,
    read_manifest,
    requirements_for,
)

pytestmark = pytest.mark.infra


def test_requirements_are_what_the_workers_import_and_no_torch() -> None:
    for kind in C.WORKER_RUNTIME:
        reqs = requirements_for(kind)
        assert not any(r.startswith(("torch", "onnx>", "onnx=")) for r in reqs), reqs
    # the CUDA 12 build: 1.26.0's provider links libcudart.so.12, 1.27.0's libcudart.so.13 (CUDA 13
    # dropped Volta)
    assert requirements_for("gpu")[-1] == "onnxruntime-gpu>=1.18,<1.27"
    assert "manylinux_2_28_x86_64" in PLATFORMS and "manylinux2014_x86_64" in PLATFORMS


def test_dry_run_names_the_platform_and_python(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("pip download") == 2
    assert f"--python-version {C.WORKER_PYTHON}" in out and "--only-binary=:all:" in out
    assert "--platform manylinux_2_28_x86_64" in out


class _Pip:
    """Stands in for pip: ``download`` leaves the wheels named, ``install --dry-run`` exits ``check``."""

    def __init__(self, wheels: list[str], download_rc: int = 0, check_rc: int = 0):
        self.wheels, self.download_rc, self.check_rc = wheels, download_rc, check_rc
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(cmd)
        if "download" in cmd:
            dest = cmd[cmd.index("--dest") + 1]
            for name in self.wheels:
                (Path(dest) / name).write_bytes(b"w")
            err = "ERROR: No matching distribution found for onnxruntime-gpu<1.27,>=1.18"
            return subprocess.CompletedProcess(cmd, self.download_rc, "", err if self.download_rc else "")
        err = "ERROR: Could not find a version that satisfies the requirement six"
        return subprocess.CompletedProcess(cmd, self.check_rc, "", err if self.check_rc else "")


_CPU_WHEELS = [
    "numpy-2.0-cp312-cp312-manylinux_2_28_x86_64.whl",
    "pydantic-2.9-py3-none-any.whl",
    "boto3-1.35-py3-none-any.whl",
    "pillow-11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
    "onnxruntime-1.20-cp312-cp312-manylinux_2_28_x86_64.whl",
]


def test_a_complete_build_writes_its_manifest(tmp_path: Path) -> None:
    pip = _Pip(_CPU_WHEELS)
    path = build_wheelhouse("cpu", tmp_path, run=pip)
    manifest = read_manifest("cpu", tmp_path)
    assert manifest is not None and path == tmp_path / "cpu"
    assert manifest["python"] == C.WORKER_PYTHON and sorted(manifest["wheels"]) == sorted(_CPU_WHEELS)  # type: ignore[arg-type]
    # the offline check ran against the built directory, --no-index, for the same platform
    (check,) = [c for c in pip.calls if "install" in c]
    assert "--no-index" in check and "--dry-run" in check and C.WORKER_PYTHON in check


@pytest.mark.parametrize(
    ("pip", "why"),
    [
        (_Pip([], download_rc=1), "No matching distribution found for onnxruntime-gpu"),
        (_Pip(_CPU_WHEELS[:-1]), "no wheel for onnxruntime-gpu"),  # pip left one out: named
        (_Pip(_CPU_WHEELS[:-1] + ["onnxruntime_gpu-1.26.0-cp312-cp312-x.whl"], check_rc=1), "six"),
    ],
)
def test_an_incomplete_build_fails_loudly_and_keeps_nothing(tmp_path: Path, pip: _Pip, why: str) -> None:
    with pytest.raises(WheelhouseError, match=why):
        build_wheelhouse("gpu", tmp_path, run=pip)
    assert read_manifest("gpu", tmp_path) is None
    assert list(tmp_path.iterdir()) == []  # the half-built directory is gone


def test_a_stale_manifest_is_not_a_build(tmp_path: Path) -> None:
    build_wheelhouse("cpu", tmp_path, run=_Pip(_CPU_WHEELS))
    doc = json.loads((tmp_path / "cpu" / MANIFEST).read_text())
    (tmp_path / "cpu" / MANIFEST).write_text(json.dumps({**doc, "python": "3.9"}))  # AL2023's system python
    assert read_manifest("cpu", tmp_path) is None


@pytest.mark.slow
def test_builds_both_kinds_from_the_package_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GIVEN the package index WHEN ``python -m cdk.deps worker`` runs THEN each kind's wheelhouse
    holds cp312 (or pure-Python) x86_64 manylinux <= 2_28 wheels only, onnxruntime for the CPU kind
    and a CUDA 12 onnxruntime-gpu for the GPU kind, and pip installs it with no index at all."""
    assert main(["worker", "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    tag = "cp" + C.WORKER_PYTHON.replace(".", "")
    for kind, runtime in (("cpu", "onnxruntime-"), ("gpu", "onnxruntime_gpu-1.2")):
        manifest = read_manifest(kind, tmp_path)
        assert manifest is not None, kind
        wheels: list[str] = manifest["wheels"]  # type: ignore[assignment]
        assert any(w.startswith(runtime) for w in wheels), (kind, wheels)
        assert not any(w.startswith(("torch", "nvidia_")) for w in wheels), wheels
        for wheel in wheels:
            py, abi, plat = wheel.removesuffix(".whl").split("-")[-3:]
            assert py in ("py3", "py2.py3", tag) or abi == "abi3", wheel
            # glibc 2.34 (AL2023) runs each: one of its tags is one pip was asked for
            assert plat == "any" or any(t in PLATFORMS for t in plat.split(".")), wheel
        with tempfile.TemporaryDirectory() as target:
            cmd = offline_install_command(tmp_path / kind, Path(target))
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
