"""The docs must match the code: docs/deploy.md's context keys, stack names, outputs and helpers; the
README's length and commands; every relative link of the README and docs/."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

import pytest

from cdk import constants as C
from cdk.config import CONTEXT_KEYS, load_catalog
from cdk.deps import main as deps_main

if TYPE_CHECKING:
    from pathlib import Path

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


def test_outputs_in_the_guide_exist(assembly: Assembly, rest_assembly: Assembly) -> None:
    """The guide shows both API variants: an output of either counts (ApiKeyId is the REST one's)."""
    outputs = {
        k for a in (assembly, rest_assembly) for doc in a.templates().values() for k in doc.get("Outputs", {})
    }
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


def test_stack_outputs_read_by_the_helper_exist(assembly: Assembly, rest_assembly: Assembly) -> None:
    outputs = {
        (name, k)
        for a in (assembly, rest_assembly)
        for name, doc in a.templates().items()
        for k in doc.get("Outputs", {})
    }
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


README = (C.REPO_ROOT / "README.md").read_text()
PAGES = [C.REPO_ROOT / "README.md", *sorted((C.REPO_ROOT / "docs").rglob("*.md"))]


def test_readme_is_short() -> None:
    """The README is for users: at most 160 lines; measurements live under docs/results/."""
    assert len(README.splitlines()) <= 160


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(C.REPO_ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link of the README and of docs/ names a file or folder in the repository."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or C.REPO_ROOT.resolve() not in path.parents:
            broken.append(target)
    assert not broken, broken


def test_nothing_cites_a_file_outside_the_repo() -> None:
    outside = ("../" + "shared", "DESIGN" + ".md")  # in two parts, so that a grep finds only real citations
    for page in PAGES:
        text = page.read_text()
        assert not any(name in text for name in outside), page


def test_readme_commands_parse() -> None:
    """Every ``skinflint ...`` and ``python -m planner ...`` line of the README's bash blocks parses."""
    from planner.cli import build_parser as planner_parser
    from skinflint.cli import build_parser

    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        lines += [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    commands = [line for line in lines if line.startswith(("skinflint ", "python -m planner "))]
    assert {"demo", "plan", "up", "apps", "status", "loadtest", "report"} <= {
        c.split()[1] for c in commands if c.startswith("skinflint")
    }
    for cmd in commands:
        argv = shlex.split(cmd, comments=True)
        parser = build_parser() if argv[0] == "skinflint" else planner_parser()
        try:
            parser.parse_args(argv[1:] if argv[0] == "skinflint" else argv[3:])
        except SystemExit as exc:  # argparse's way of saying no
            raise AssertionError(f"the CLI refuses: {cmd}") from exc
