"""Asset directories built at synth time by plain Python (no Docker, no network).

The Lambda code asset is a copy of the project's source packages (``functions/``, ``planner/``); the
third-party dependencies ride in a layer built beforehand by ``python -m cdk.deps lambda`` (pip,
once, with network). The worker asset is a copy of the packages the worker imports; its wheels come
from ``python -m cdk.deps worker``. When a dependency directory is missing, synthesis still works
and the app adds a warning saying which command fills it. The models asset is the directory
``skinflint models build`` writes, its ``<model>.onnx`` files only (``-c models``, cdk/config.py).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from cdk import constants as C
from profiles.store import PACKAGE_ROOT, LocalStore

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["MODEL_ASSET_EXCLUDE", "dependency_dir", "model_files", "missing_demo_models", "stage_packages"]

_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.pyo", ".mypy_cache", ".pytest_cache", "*.egg-info"
)


def stage_packages(name: str, packages: Iterable[str], extra_files: dict[str, str] | None = None) -> Path:
    """Copy ``packages`` (top-level folders of the repository) into a fresh directory and return it.

    The directory lives under ``build/cdk-staging`` and is removed when the process exits (CDK copies
    an asset into the cloud assembly when the construct is created). ``extra_files`` maps relative
    paths to text written beside the packages (e.g. a requirements file)."""
    C.STAGING_DIR.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=C.STAGING_DIR))
    atexit.register(shutil.rmtree, root, True)
    for pkg in packages:
        src = C.REPO_ROOT / pkg
        if not (src / "__init__.py").is_file():
            raise FileNotFoundError(f"{src} is not a Python package")
        shutil.copytree(src, root / pkg, ignore=_IGNORE)
    for rel, text in (extra_files or {}).items():
        (root / rel).write_text(text)
    return root


# CDK asset exclude globs (gitignore style): every file but the ONNX models themselves (no half-written
# ``.onnx.tmp`` of an interrupted build, no profiles, nothing in subdirectories).
MODEL_ASSET_EXCLUDE = ("*", f"!*{C.MODEL_SUFFIX}", "*/")


def model_files(models_dir: Path) -> list[Path]:
    """The files of the models asset: ``<model>.onnx`` directly in ``models_dir``."""
    return sorted(path for path in models_dir.glob(f"*{C.MODEL_SUFFIX}") if path.is_file())


def missing_demo_models(models_dir: Path) -> list[str]:
    """DNN models of the packaged demo apps that ``models_dir`` lacks (their shares run emulated)."""
    store = LocalStore(PACKAGE_ROOT)
    have = {path.name.removesuffix(C.MODEL_SUFFIX) for path in model_files(models_dir)}
    wanted = {
        module.model
        for app in store.list_apps()
        for module in store.load_app(app).modules.values()
        if module.kind == "dnn"
    }
    return sorted(wanted - have)


def dependency_dir(path: Path, marker: str) -> Path | None:
    """``path`` if it holds a built dependency set (``marker`` exists inside), else None."""
    return path if (path / marker).exists() else None
