"""cdk-nag (AwsSolutions, via CDK's policy-validation plugins) and cfn-lint on every template."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.infra.conftest import _FIGURES, SYNTH_BUDGET_S

if TYPE_CHECKING:
    from tests.infra.conftest import Assembly

pytestmark = pytest.mark.infra


def _acknowledgements(assembly: Assembly) -> dict[str, str]:
    """AwsSolutions acknowledgements written to the templates (write_suppressions_to_cloud_formation)."""
    out: dict[str, str] = {}
    for doc in assembly.templates().values():
        for r in doc["Resources"].values():
            for s in r.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
                if s["id"].startswith("AwsSolutions-"):
                    out[s["id"]] = s["reason"]
    return out


def test_synthesis_within_budget(assembly: Assembly) -> None:
    """Every stack, cdk-nag included, in at most SYNTH_BUDGET_S (the figure is printed at the end).
    Wall time on an overloaded machine (load average above twice the CPUs: other jobs hold the
    cores) says nothing about the app; the test then skips, naming the figures."""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if assembly.synth_s > SYNTH_BUDGET_S and load > 2 * cpus:
        pytest.skip(
            f"synthesis took {assembly.synth_s:.1f} s wall ({_FIGURES.get('cpu_s', 0.0):.1f} s CPU) "
            f"at load average {load:.1f} on {cpus} CPUs"
        )
    assert assembly.synth_s <= SYNTH_BUDGET_S


def test_no_unacknowledged_nag_findings(assembly: Assembly) -> None:
    # the session fixture's synth() would have raised ValidationFailed on any finding; the report
    # (when written) must hold no AwsSolutions violation either
    report = assembly.outdir / "validation-report.json"
    if report.exists():
        for plugin in json.loads(report.read_text())["pluginReports"]:
            assert plugin["violations"] == [], plugin["pluginName"]


def test_every_acknowledgement_has_a_written_reason(assembly: Assembly) -> None:
    acks = _acknowledgements(assembly)
    assert acks, "acknowledgements are expected in the template metadata"
    for rule, reason in acks.items():
        assert len(reason) >= 40, f"{rule}: {reason!r}"
    # no blanket acknowledgement of wildcard actions
    assert not [r for r in acks if r.startswith("AwsSolutions-IAM5[Action::")]


def test_nag_plugin_catches_a_finding(tmp_path: Path) -> None:
    """Negative control: the same plugin wiring fails synthesis on an unacknowledged finding."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_sqs as sqs

    from cdk.nag import enable_aws_solutions_checks

    app = App(outdir=str(tmp_path))
    sqs.Queue(Stack(app, "Bad"), "NoDlqNoTls")
    enable_aws_solutions_checks(app)
    with pytest.raises(RuntimeError, match="AwsSolutions-SQS3"):
        app.synth()


def test_cfn_lint_reports_no_errors(assembly: Assembly) -> None:
    templates = sorted(str(p) for p in assembly.outdir.glob("*.template.json"))
    exe = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or "cfn-lint"
    out = subprocess.run(
        [exe, "--format", "parseable", *templates], check=False, capture_output=True, text=True, timeout=120
    )
    # exit code is a bit mask: 2 = error, 4 = warning, 8 = informational
    errors = [line for line in out.stdout.splitlines() if ":E" in line]
    assert out.returncode & 2 == 0 and not errors, out.stdout[-4000:] + out.stderr[-2000:]
