"""checkov on the synthesized templates: every finding is skipped on its resource with a written
reason (cdk/checkov.py), and checkov itself finds nothing else (when it is installed: ``make checkov``
puts it in .venv-checkov; it cannot share the project's venv, see cdk/checkov.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cdk import constants as C

if TYPE_CHECKING:
    from tests.infra.conftest import Assembly

pytestmark = pytest.mark.infra


def _skips(assembly: Assembly) -> dict[tuple[str, str], list[dict[str, str]]]:
    out: dict[tuple[str, str], list[dict[str, str]]] = {}
    for stack in (C.STATEFUL_STACK, C.CONTROL_STACK, C.FLEET_STACK, C.FRONT_STACK, C.OBSERVABILITY_STACK):
        for logical, res in assembly.template(stack)["Resources"].items():
            skip = res.get("Metadata", {}).get("checkov", {}).get("skip")
            if skip:
                out[(stack, logical)] = skip
    return out


# the 9 checks checkov 3.3.30 reported on the default synthesis (24 findings, HTTP API front); the
# REST API variant (-c front_api=rest) adds its stage's cache and X-Ray checks (26 findings)
DEFAULT_CHECKS = [
    "CKV_AWS_115",
    "CKV_AWS_116",
    "CKV_AWS_117",
    "CKV_AWS_119",
    "CKV_AWS_158",
    "CKV_AWS_173",
    "CKV_AWS_18",
    "CKV_AWS_21",
    "CKV_AWS_27",
]
REST_STAGE_CHECKS = ["CKV_AWS_120", "CKV_AWS_73"]
SKIPPED = {"default": 24, "rest": 26}


@pytest.fixture(params=["default", "rest"])
def variant(request: pytest.FixtureRequest) -> tuple[str, Assembly]:
    """The default synthesis (HTTP API) and the -c front_api=rest one."""
    assembly: Assembly = request.getfixturevalue(
        "assembly" if request.param == "default" else "rest_assembly"
    )
    return request.param, assembly


def test_every_skip_names_a_check_and_says_why(variant: tuple[str, Assembly]) -> None:
    name, assembly = variant
    skips = _skips(assembly)
    ids = sorted({s["id"] for skip in skips.values() for s in skip})
    assert ids == sorted(DEFAULT_CHECKS + (REST_STAGE_CHECKS if name == "rest" else []))
    assert sum(len(skip) for skip in skips.values()) == SKIPPED[name]
    assert all(len(s["comment"]) >= 40 for skip in skips.values() for s in skip)


def _checkov() -> str | None:
    env = os.environ.get("SKINFLINT_CHECKOV")
    if env:
        return env
    local = C.REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
    return str(local) if local.exists() else shutil.which("checkov")


def test_checkov_finds_nothing_unacknowledged(variant: tuple[str, Assembly]) -> None:
    name, assembly = variant
    binary = _checkov()
    if binary is None:
        pytest.skip("checkov is not installed: `make checkov` installs it in .venv-checkov")
    run = subprocess.run(
        [
            binary,
            "-d",
            str(Path(assembly.outdir)),
            "--framework",
            "cloudformation",
            "--skip-download",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    doc: Any = json.loads(run.stdout)
    failed = [(f["check_id"], f["resource"]) for f in doc["results"]["failed_checks"]]
    assert failed == [], failed
    assert doc["summary"]["skipped"] == SKIPPED[name] and run.returncode == 0
