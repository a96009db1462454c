"""Build the third-party dependencies the deployed code needs, with pip, before ``cdk deploy``.

    python -m cdk.deps lambda            # build/lambda-deps/python/: the front/planner Lambda layer
    python -m cdk.deps worker            # build/worker-wheels/{cpu,gpu}/: the workers' wheelhouses
    python -m cdk.deps worker --kind gpu # one hardware kind only

Both download binary wheels for the target's own platform (nothing is compiled): CPython
``C.LAMBDA_PYTHON`` / ``C.WORKER_PYTHON`` on x86_64 with glibc >= 2.34 (Lambda's python3.13 runtime
and the workers' AMIs are Amazon Linux 2023), so any ``manylinux`` wheel up to ``manylinux_2_28``
installs (onnxruntime >= 1.18 ships only those). Each wheelhouse holds every wheel its
``requirements.txt`` needs, with its dependencies, and a ``manifest.json`` (Python version, platform
tags, wheels); the workers install it with ``pip install --no-index`` (cdk/userdata.py), since their
subnets reach no package index. A requirement without a wheel for the platform fails the build
with one line naming it. Synthesis never runs this (it needs the network); it ships what is built and
warns about what is not.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdk import constants as C

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "PLATFORMS",
    "WheelhouseError",
    "build_lambda_layer",
    "build_wheelhouse",
    "main",
    "pip_download_command",
    "read_manifest",
    "requirements_for",
]

# pip --platform tags the targets accept, newest first: glibc 2.34 (AL2023) runs manylinux_2_17 ..
# manylinux_2_34 wheels. pip matches each tag exactly, so the older aliases are listed too
# (manylinux2014 = manylinux_2_17; numpy and pillow ship manylinux_2_27 + _2_28 dual tags).
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
MANIFEST = "manifest.json"
REQUIREMENTS = "requirements.txt"


class WheelhouseError(RuntimeError):
    """A wheelhouse could not be built or is incomplete; the message is one line for the user."""


def _platform_args(python: str) -> list[str]:
    out: list[str] = []
    for tag in PLATFORMS:
        out += ["--platform", tag]
    return [*out, "--only-binary=:all:", "--implementation", "cp", "--python-version", python]


def build_lambda_layer() -> list[str]:
    target = C.LAMBDA_DEPS_DIR / "python"  # Lambda adds <layer>/python to sys.path
    return [
        sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
        *_platform_args(C.LAMBDA_PYTHON), *C.LAMBDA_REQUIREMENTS,
    ]  # fmt: skip


def requirements_for(kind: str) -> tuple[str, ...]:
    """What a worker of ``kind`` (``cpu`` | ``gpu``) installs: what the agent imports, no torch."""
    return (*C.WORKER_REQUIREMENTS, C.WORKER_RUNTIME[kind])


def pip_download_command(kind: str, dest: Path) -> list[str]:
    return [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--dest", str(dest), *_platform_args(C.WORKER_PYTHON), "-r", str(dest / REQUIREMENTS),
    ]  # fmt: skip


def _project(requirement: str) -> str:
    """The normalised project name of a requirement (``onnxruntime-gpu>=1.18`` -> ``onnxruntime_gpu``)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    if match is None:
        raise WheelhouseError(f"cannot read the requirement {requirement!r}")
    return re.sub(r"[-_.]+", "_", match.group(0)).lower()


def _wheel_project(path: Path) -> str:
    return re.sub(r"[-_.]+", "_", path.name.split("-", 1)[0]).lower()


def build_wheelhouse(
    kind: str, out_dir: Path = C.WORKER_WHEELS_DIR, run: Callable[..., Any] = subprocess.run
) -> Path:
    """Download kind's wheels into ``out_dir/kind`` (replaced only once the build succeeded)."""
    if kind not in C.WORKER_RUNTIME:
        raise WheelhouseError(f"unknown worker kind {kind!r}: expected one of {', '.join(C.WORKER_RUNTIME)}")
    reqs = requirements_for(kind)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=out_dir))
    try:
        (work / REQUIREMENTS).write_text("\n".join(reqs) + "\n")
        cmd = pip_download_command(kind, work)
        print(" ".join(cmd), flush=True)
        proc = run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = [line for line in (proc.stderr or "").splitlines() if line.strip()]
            why = tail[-1] if tail else f"pip exited {proc.returncode}"
            raise WheelhouseError(
                f"{kind} wheelhouse: pip found no complete set of cp{C.WORKER_PYTHON.replace('.', '')} "
                f"x86_64 manylinux wheels: {why}"
            )
        wheels = sorted(work.glob("*.whl"))
        _check_offline(kind, work, run)
        have = {_wheel_project(path) for path in wheels}
        missing = [req for req in reqs if _project(req) not in have]
        if missing:
            raise WheelhouseError(f"{kind} wheelhouse: no wheel for {', '.join(missing)}")
        (work / MANIFEST).write_text(
            json.dumps(
                {
                    "kind": kind,
                    "python": C.WORKER_PYTHON,
                    "platforms": list(PLATFORMS),
                    "requirements": list(reqs),
                    "wheels": [path.name for path in wheels],
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                indent=2,
            )
            + "\n"
        )
        final = out_dir / kind
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def offline_install_command(wheelhouse: Path, target: Path) -> list[str]:
    """pip's own check that the wheelhouse alone satisfies its requirements on the target platform,
    as the instance installs it (``--no-index``), without installing anything."""
    return [
        sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
        "--no-index", "--find-links", str(wheelhouse), "--target", str(target),
        *_platform_args(C.WORKER_PYTHON), "-r", str(wheelhouse / REQUIREMENTS),
    ]  # fmt: skip


def _check_offline(kind: str, wheelhouse: Path, run: Callable[..., Any]) -> None:
    with tempfile.TemporaryDirectory() as target:
        cmd = offline_install_command(wheelhouse, Path(target))
        proc = run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = [line for line in (proc.stderr or "").splitlines() if line.strip()]
        raise WheelhouseError(
            f"{kind} wheelhouse does not install offline: {tail[-1] if tail else proc.returncode}"
        )


def read_manifest(kind: str, out_dir: Path = C.WORKER_WHEELS_DIR) -> dict[str, object] | None:
    """The manifest of kind's built wheelhouse if it is complete for today's requirements, else None."""
    path = out_dir / kind / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    current = doc.get("python") == C.WORKER_PYTHON and doc.get("requirements") == list(requirements_for(kind))
    wheels = doc.get("wheels")
    present = isinstance(wheels, list) and all((out_dir / kind / str(name)).is_file() for name in wheels)
    return doc if current and present else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdk.deps", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["lambda", "worker"])
    parser.add_argument(
        "--kind", choices=sorted(C.WORKER_RUNTIME), action="append", help="worker kinds (default: all)"
    )
    parser.add_argument("--out", type=Path, default=C.WORKER_WHEELS_DIR, help="worker wheelhouse root")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands only")
    args = parser.parse_args(argv)
    if args.what == "lambda":
        cmd = build_lambda_layer()
        print(" ".join(cmd))
        if args.dry_run:
            return 0
        shutil.rmtree(C.LAMBDA_DEPS_DIR, ignore_errors=True)
        return subprocess.call(cmd)
    kinds = args.kind or sorted(C.WORKER_RUNTIME)
    if args.dry_run:
        for kind in kinds:
            cmd = pip_download_command(kind, args.out / kind)
            print(" ".join(cmd), "#", " ".join(requirements_for(kind)))
        return 0
    for kind in kinds:
        try:
            path = build_wheelhouse(kind, args.out)
        except WheelhouseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        count = len(list(path.glob("*.whl")))
        size_mb = sum(p.stat().st_size for p in path.glob("*.whl")) / 1e6
        target = f"CPython {C.WORKER_PYTHON}, x86_64 manylinux"
        print(f"{kind}: {count} wheels, {size_mb:.0f} MB in {path} ({target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
