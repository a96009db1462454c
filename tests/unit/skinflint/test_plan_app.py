"""``skinflint plan APP --rate R``: an app planned at a frame rate through the control loop's own code
path (the registration's first-plan rate, the epoch's problem and dispatch-aware solve, packing), with
no stack running; bad input gets one line and exit 1."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from control.config import ControlConfig
from control.preview import preview_app
from control.registration.checks import check_plannable, first_plan_rate
from control.registration.validate import validate_spec
from control.spec import profile_lookup
from profiles.store import PACKAGE_ROOT, LocalStore
from skinflint.cli import main

if TYPE_CHECKING:
    from pathlib import Path

STORE = LocalStore(PACKAGE_ROOT)  # the packaged profiles, what `--profiles packaged` (default) reads


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["plan", *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_a_demo_app_is_planned_at_its_rate_with_the_fleet_and_every_modules_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = plan_json(capsys, "traffic", "--rate", "1000")
    assert doc["app"] == "traffic" and doc["frame_rate"] == 1000
    # the control loop's headroom (0.1) through the forecast's quantisation: at least 1,100 frames/s
    assert doc["planned_rate"] >= 1000 * (1 + ControlConfig().headroom)
    prices, counts = doc["prices"], doc["instances"]
    assert doc["fleet_per_hour"] == pytest.approx(sum(prices[hw] * n for hw, n in counts.items()))
    assert set(doc["modules"]) == {"detector", "vehicle", "person"}
    for module in doc["modules"].values():
        assert module["groups"] and module["worst_case_latency_s"] <= module["latency_budget_s"] + 1e-9
    # the $/h says what it covers and where its prices come from (dated)
    assert doc["cost_scope"].startswith("EC2 fleet only")
    assert {hw for hw, n in counts.items() if n} == set(doc["price_sources"])
    assert all(price["date"] and price["source"] for price in doc["price_sources"].values())
    # every module's profile source is named per hardware class (measured here or derived)
    assert set(doc["profiles"]["modules"]["detector"].values()) <= {"measured", "derived"}


def test_the_plan_is_the_one_the_registration_check_solves_for_the_same_rate() -> None:
    # GIVEN the traffic app's spec at 200 frames/s, checked as `skinflint apps register` checks it
    config = ControlConfig()
    doc = {**STORE.load_app("traffic").model_dump(mode="json", exclude_none=True), "rate": 200}
    catalog = STORE.load_catalog()
    spec = validate_spec(doc, catalog=catalog, stored_profile=profile_lookup(STORE), check_feasible=False)
    # WHEN it is previewed and checked as the first epoch plans it
    preview = preview_app(doc, 200, catalog=catalog, stored_profile=profile_lookup(STORE), config=config)
    seed = check_plannable(
        spec,
        catalog,
        None,
        overhead_s=config.hop_overhead_s,
        headroom=config.headroom,
        child_headroom=config.child_headroom,
        policy=config.policy,
    )
    # THEN the same rate, the same groups
    assert preview.planned_rate == first_plan_rate(spec, config.headroom)
    for name, module in seed.modules.items():
        planned = preview.plan.modules[name]
        assert [g.model_dump() for g in planned.groups] == [g.model_dump() for g in module.groups]
    assert preview.fleet_per_hour == pytest.approx(preview.fleet.billed_per_hour)


def test_a_spec_file_in_yaml_is_planned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cams.yaml"
    spec.write_text(
        "name: cams\nslo_s: 0.5\nrate: 1\nmodules:\n  detector: {model: ssdlite_mnv2}\n"
        "  vehicle: {model: resnet18_vehicle}\nedges: [[detector, vehicle, 2.0]]\n"
    )
    doc = plan_json(capsys, str(spec), "--rate", "50")
    assert doc["app"] == "cams" and doc["frame_rate"] == 50  # --rate replaces the spec's rate
    assert doc["fleet_per_hour"] > 0


def test_the_table_names_the_fleet_and_its_cost(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "face", "--rate", "30"]) == 0
    out = capsys.readouterr().out
    assert "packed fleet" in out and "fleet $" in out and "headroom 0.1" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nosuchapp", "--rate", "5"], "no application 'nosuchapp'"),
        (["traffic", "--rate", "0"], "--rate must be a number of frames/s > 0"),
        (["traffic", "--rate", "-2"], "--rate must be a number of frames/s > 0"),
        (["traffic", "--rate", "nan"], "--rate must be a number of frames/s > 0"),
        (["traffic"], "add --rate"),
        (["missing/spec.yaml", "--rate", "3"], "no such file"),
    ],
)
def test_bad_input_gets_one_line_and_exit_1(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_an_invalid_spec_file_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\nslo_s: -1\nmodules: {}\n")
    assert main(["plan", str(spec), "--rate", "10"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("skinflint: error: app 'bad':") and len(err.splitlines()) == 1


def test_the_planners_settings_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the deployed planner's batch overhead (cdk/constants.py BATCH_OVERHEAD_S) and a larger headroom
    monkeypatch.setenv("SKINFLINT_BATCH_OVERHEAD_S", "0.02")
    monkeypatch.setenv("SKINFLINT_PLANNER_HEADROOM", "0.3")
    doc = plan_json(capsys, "traffic", "--rate", "100")
    assert doc["settings"]["batch_overhead_s"] == 0.02 and doc["settings"]["headroom"] == 0.3
    assert doc["planned_rate"] >= 130  # 100 frames/s + 30 % headroom
    monkeypatch.setenv("SKINFLINT_PLANNER_HEADROOM", "lots")
    assert main(["plan", "traffic", "--rate", "100"]) == 1
    err = capsys.readouterr().err.strip()
    assert "bad planner setting" in err and len(err.splitlines()) == 1


def test_a_problem_file_still_plans_without_a_rate(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(capsys, str(PACKAGE_ROOT.parent / "examples" / "piccolo_m1.json"))
    assert doc["modules"] and doc["billed_per_hour"] > 0
