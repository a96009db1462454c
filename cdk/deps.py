"""Build the third-party dependencies the deployed code needs, with pip, before ``cdk deploy``.

    python -m cdk.deps lambda   # build/lambda-deps/python/: the front/planner Lambda layer
    python -m cdk.deps worker   # build/worker-wheels/: wheels the workers install without internet

Both download manylinux x86_64 wheels from PyPI for the target Python (Lambda 3.13, workers 3.11);
nothing is compiled. Synthesis never runs this (it needs network); it only checks that the
directories exist and warns when they do not.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from cdk import constants as C

__all__ = ["build_lambda_layer", "build_worker_wheels", "main"]

_PLATFORM = ("--platform", "manylinux2014_x86_64", "--only-binary=:all:", "--implementation", "cp")


def build_lambda_layer() -> list[str]:
    target = C.LAMBDA_DEPS_DIR / "python"  # Lambda adds <layer>/python to sys.path
    return [
        sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), *_PLATFORM,
        "--python-version", C.LAMBDA_PYTHON, *C.LAMBDA_REQUIREMENTS,
    ]  # fmt: skip


def build_worker_wheels() -> list[str]:
    return [
        sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(C.WORKER_WHEELS_DIR), *_PLATFORM,
        "--python-version", C.WORKER_PYTHON, *C.WORKER_REQUIREMENTS, *C.WORKER_RUNTIME.values(),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdk.deps", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["lambda", "worker"])
    parser.add_argument("--dry-run", action="store_true", help="print the pip command only")
    args = parser.parse_args(argv)
    cmd = build_lambda_layer() if args.what == "lambda" else build_worker_wheels()
    print(" ".join(cmd))
    if args.dry_run:
        return 0
    shutil.rmtree(C.LAMBDA_DEPS_DIR if args.what == "lambda" else C.WORKER_WHEELS_DIR, ignore_errors=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
