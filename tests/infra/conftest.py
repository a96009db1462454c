"""Synthesize the whole app once per session (cdk-nag on) into a temporary cloud assembly."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

# Explicit, so the tests do not depend on cdk.json's defaults changing. "models": the session's
# assembly ships the fixture models below; other syntheses deploy without (no build cache needed).
CONTEXT: dict[str, Any] = {
    "account": "123456789012",
    "region": "us-east-1",
    "hardware": "t4,v100,cpu",
    "models": "none",
}
# The REST API + WAF variant (-c front_api=rest), with limits off their defaults: the usage plan's
# quota and the WAF rule follow the context (the default app is the HTTP API, which has neither).
REST_CONTEXT: dict[str, Any] = {
    **CONTEXT,
    "front_api": "rest",
    "api_rate": "750",
    "api_burst": "1500",
    "api_quota": "6000000",
    "waf_rate": "45000",
}
# What the fixture models directory holds: two models, plus what must not ship (an interrupted
# build's temporary file, a note, a subdirectory).
FIXTURE_MODELS = {"ssdlite_mnv2.onnx": b"onnx-detector", "resnet18_vehicle.onnx": b"onnx-vehicle"}
FIXTURE_JUNK = {"resnet18_face.onnx.tmp": b"half", "README.txt": b"note", "old/landmark_net.onnx": b"x"}
SYNTH_BUDGET_S = 30.0  # s: synthesis of every stack, cdk-nag included (issue #6)
_FIGURES: dict[str, float] = {}


@dataclass
class Assembly:
    outdir: Path
    synth_s: float

    def template(self, stack: str) -> dict[str, Any]:
        return json.loads((self.outdir / f"{stack}.template.json").read_text())

    def templates(self) -> dict[str, dict[str, Any]]:
        return {
            p.name.removesuffix(".template.json"): json.loads(p.read_text())
            for p in self.outdir.glob("*.template.json")
        }

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.outdir / "manifest.json").read_text())

    def warnings(self, stack: str) -> list[str]:
        """The stack's warning annotations (in the manifest or its additional metadata file)."""
        artifact = self.manifest()["artifacts"][stack]
        meta = dict(artifact.get("metadata", {}))
        if artifact.get("additionalMetadataFile"):
            meta.update(json.loads((self.outdir / artifact["additionalMetadataFile"]).read_text()))
        return [e["data"] for entries in meta.values() for e in entries if e["type"] == "aws:cdk:warning"]


def _cpu_s() -> float:
    """CPU seconds of this process and its children still running (the jsii node kernel), from
    /proc; wall time alone depends on what else holds the cores."""
    total = time.process_time()
    todo, seen = [str(os.getpid())], set()
    try:
        while todo:  # descendants: the jsii runtime starts the kernel as its own child
            pid = todo.pop()
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [c for c in (task / "children").read_text().split() if c not in seen]
            if pid != str(os.getpid()):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            seen.add(pid)
    except (OSError, ValueError, IndexError):
        pass
    return total


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for the build cache's models directory (``skinflint models build`` writes it)."""
    root = tmp_path_factory.mktemp("models")
    for rel, data in {**FIXTURE_MODELS, **FIXTURE_JUNK}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Assembly:
    """GIVEN the default deployment (t4, v100 and every CPU class, on-demand, built models) WHEN
    synthesized with cdk-nag's AwsSolutions pack THEN synthesis succeeds (a single unacknowledged
    finding would raise)."""
    from cdk.app import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    t0, c0 = time.perf_counter(), _cpu_s()
    build_app({**CONTEXT, "models": str(models_dir)}, outdir=str(outdir), nag=True).synth()
    _FIGURES["synth_s"] = time.perf_counter() - t0
    _FIGURES["cpu_s"] = _cpu_s() - c0
    _FIGURES["load"] = os.getloadavg()[0]
    return Assembly(outdir=outdir, synth_s=_FIGURES["synth_s"])


@pytest.fixture(scope="session")
def rest_assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """GIVEN ``-c front_api=rest`` (REST API, usage plan, WAF) WHEN synthesized with cdk-nag THEN
    synthesis succeeds (a single unacknowledged finding would raise)."""
    from cdk.app import build_app

    outdir = tmp_path_factory.mktemp("cdk.rest")
    t0 = time.perf_counter()
    build_app(REST_CONTEXT, outdir=str(outdir), nag=True).synth()
    _FIGURES["rest_synth_s"] = time.perf_counter() - t0
    return Assembly(outdir=outdir, synth_s=_FIGURES["rest_synth_s"])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "synth_s" in _FIGURES:
        terminalreporter.write_line(
            f"infra: synthesis of every stack with cdk-nag took {_FIGURES['synth_s']:.1f} s wall, "
            f"{_FIGURES['cpu_s']:.1f} s CPU (budget {SYNTH_BUDGET_S:g} s; load average {_FIGURES['load']:.2f} on {os.cpu_count()} CPUs)"
        )
    if "rest_synth_s" in _FIGURES:
        terminalreporter.write_line(
            f"infra: synthesis of the -c front_api=rest variant took {_FIGURES['rest_synth_s']:.1f} s wall"
        )


def resources(template: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == rtype}
