"""Synthesize the whole app once per session (cdk-nag on) into a temporary cloud assembly."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

# Explicit, so the tests do not depend on cdk.json's defaults changing.
CONTEXT: dict[str, Any] = {"account": "123456789012", "region": "us-east-1", "hardware": "t4,v100,cpu"}


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


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """GIVEN the default deployment (t4, v100 and every CPU class, on-demand) WHEN synthesized with
    cdk-nag's AwsSolutions pack THEN synthesis succeeds (a single unacknowledged finding would raise)."""
    from cdk.app import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    t0 = time.perf_counter()
    build_app(CONTEXT, outdir=str(outdir), nag=True).synth()
    return Assembly(outdir=outdir, synth_s=time.perf_counter() - t0)


def resources(template: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == rtype}
