"""Context variants that change the fleet: Spot with capacity rebalancing, P100 mapped by the user,
no models shipped (``-c models=none``, from CONTEXT). Synthesized with cdk-nag too: the
mixed-instances groups meet different rules than the default app."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from cdk import constants as C
from tests.infra.conftest import CONTEXT, Assembly, resources

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def spot_assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    from cdk.app import build_app

    outdir: Path = tmp_path_factory.mktemp("cdk.spot")
    ctx = {**CONTEXT, "hardware": "t4,p100", "p100_instance_type": "g4dn.2xlarge", "spot": "true"}
    assert ctx["models"] == "none"
    build_app(ctx, outdir=str(outdir), nag=True).synth()
    return Assembly(outdir=outdir, synth_s=0.0)


@pytest.fixture(scope="module")
def spot_fleet(spot_assembly: Assembly) -> dict[str, Any]:
    return spot_assembly.template(C.FLEET_STACK)


def test_spot_groups_rebalance_and_use_spot_only(spot_fleet: dict[str, Any]) -> None:
    groups = resources(spot_fleet, "AWS::AutoScaling::AutoScalingGroup")
    assert len(groups) == 2
    for g in groups.values():
        p = g["Properties"]
        assert p["CapacityRebalance"] is True
        dist = p["MixedInstancesPolicy"]["InstancesDistribution"]
        assert dist["OnDemandPercentageAboveBaseCapacity"] == 0
        assert dist["SpotAllocationStrategy"] == "price-capacity-optimized"


def test_p100_group_launches_the_mapped_type(spot_fleet: dict[str, Any]) -> None:
    types = {
        g["Properties"]["AutoScalingGroupName"]: g["Properties"]["MixedInstancesPolicy"]["LaunchTemplate"][
            "Overrides"
        ][0]["InstanceType"]
        for g in resources(spot_fleet, "AWS::AutoScaling::AutoScalingGroup").values()
    }
    assert types == {"skinflint-workers-t4": "g4dn.xlarge", "skinflint-workers-p100": "g4dn.2xlarge"}


# -- without models (-c models=none) ------------------------------------------------------------------
def test_without_models_nothing_ships_and_the_output_says_so(spot_assembly: Assembly) -> None:
    from tests.infra.test_wiring import user_data_text

    doc = spot_assembly.template(C.FLEET_STACK)
    assert doc["Outputs"]["Models"]["Value"] == "none: every share runs emulated"
    assert any(
        "skinflint:models" in w and "every share runs emulated" in w
        for w in spot_assembly.warnings(C.FLEET_STACK)
    )
    policies = json.dumps(resources(doc, "AWS::IAM::Policy"))
    assert '"Sid": "Models"' not in policies
    ud = user_data_text(doc, "t4")
    assert f"{C.WORKER_MODEL_DIR}.zip" not in ud and "unzip -q -o" in ud  # the code, not models
    # the directory exists and the agent is pointed at it: every share finds no model and emulates
    assert f"install -d -m 0755 /opt/skinflint /opt/skinflint/app {C.WORKER_MODEL_DIR} " in ud
    assert f"echo 'SKINFLINT_MODEL_DIR={C.WORKER_MODEL_DIR}' >> /etc/skinflint/worker.env" in ud
