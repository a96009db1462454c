"""docs/deploy.md's commands must match the code: context keys, stack names, outputs, helpers."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from cdk import constants as C
from cdk.config import CONTEXT_KEYS, load_catalog
from cdk.deps import main as deps_main

if TYPE_CHECKING:
    from tests.infra.conftest import Assembly

pytestmark = pytest.mark.infra

DOC = (C.REPO_ROOT / "docs" / "deploy.md").read_text()


def test_context_keys_in_the_guide_are_read_by_the_app() -> None:
    known = set(CONTEXT_KEYS) | {f"{name}_instance_type" for name in load_catalog()}
    used = set(re.findall(r"-c ([a-z0-9_.]+)=", DOC))
    assert used, "the guide shows -c options"
    assert used <= known, used - known


def test_stack_names_in_the_guide_exist() -> None:
    named = set(re.findall(r"Skinflint-[A-Z][a-z]+", DOC))
    assert named <= set(C.ALL_STACKS), named - set(C.ALL_STACKS)
    assert set(C.ALL_STACKS) <= named


def test_outputs_in_the_guide_exist(assembly: Assembly) -> None:
    outputs = {k for doc in assembly.templates().values() for k in doc.get("Outputs", {})}
    for key in re.findall(r"OutputKey=='(\w+)'", DOC):
        assert key in outputs, key


def test_cli_is_pinned_and_names_match() -> None:
    assert "npx aws-cdk@2.1148.1" in DOC
    assert f"/{C.API_STAGE}/" in DOC
    assert C.CONFIG_TABLE_NAME in DOC and C.DRAIN_HOOK_NAME in DOC and C.ASG_NAME_PREFIX in DOC


@pytest.mark.parametrize("what", ["lambda", "worker"])
def test_deps_commands_exist(what: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert f"python -m cdk.deps {what}" in DOC
    assert deps_main([what, "--dry-run"]) == 0
    assert "pip" in capsys.readouterr().out
