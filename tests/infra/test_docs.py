"""docs/deploy.md's commands must match the code: context keys, stack names, outputs, helpers."""

from __future__ import annotations

import re
import shlex
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


def _shell_lines() -> list[str]:
    """Commands of the guide's bash blocks, continuation lines joined, comments dropped."""
    out: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", DOC, re.S):
        joined = re.sub(r"\\\n", " ", block)
        for line in joined.splitlines():
            out.append(line.split("  #", 1)[0].strip())
    return [line for line in out if line and not line.startswith("#")]


def test_stack_outputs_read_by_the_helper_exist(assembly: Assembly) -> None:
    outputs = {(name, k) for name, doc in assembly.templates().items() for k in doc.get("Outputs", {})}
    used = set(re.findall(r"\bout (Skinflint-[A-Za-z]+) (\w+)\)", DOC))
    assert used, "the guide reads stack outputs with out STACK KEY"
    assert used <= outputs, used - outputs


def test_skinflint_commands_in_the_guide_parse() -> None:
    """Every ``skinflint ...`` command the guide shows is accepted by the CLI's parser."""
    from skinflint.cli import build_parser

    commands = [m for line in _shell_lines() for m in re.findall(r"(?:^|\$\()(skinflint [^)#]*)", line)]
    shown = {c.split()[1] for c in commands}
    assert {"apps", "loadtest", "report", "status"} <= shown, shown
    parser = build_parser()
    for cmd in commands:
        argv = shlex.split(cmd)[1:]
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse's way of saying no
            raise AssertionError(f"the CLI refuses: {cmd}") from exc
        assert getattr(args, "func", None), cmd


def test_curl_routes_in_the_guide_exist() -> None:
    from front.app import create_app

    app = create_app(lambda: None)  # type: ignore[arg-type, return-value]  # routes only
    routes = [(m, r.path) for r in app.routes for m in getattr(r, "methods", ())]
    calls = []
    for line in _shell_lines():
        for m in re.finditer(r"curl .*?\$\{API_URL\}(v1/[^\"? ]*)", line):
            method = re.search(r"-X (\w+)", line)
            calls.append((method.group(1) if method else "GET", "/" + m.group(1)))
    assert ("POST", "/v1/apps") in calls, calls
    for method, path in calls:
        ok = any(
            method == m and re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", route), path) for m, route in routes
        )
        assert ok, (method, path)
