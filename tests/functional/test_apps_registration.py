"""App registration: every problem of a spec listed at once, storage (S3 + index), the CLI and the
admin API against moto."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from control.errors import RegistrationError
from control.registration.validate import validate_registration, validate_spec
from profiles.hardware import load_catalog
from skinflint.cli import main
from tests.functional.test_control_epoch import SPEC

pytestmark = pytest.mark.functional

CATALOG = load_catalog()


def problems_of(doc: Any, **kw: Any) -> list[str]:
    with pytest.raises(RegistrationError) as err:
        validate_spec(doc, catalog=CATALOG, stored_profile=lambda _m: None, **kw)
    assert str(err.value).count(";") == len(err.value.problems) - 1  # one line, every problem
    return err.value.problems


def test_every_problem_is_listed() -> None:
    bad = {
        "name": "bad name!",
        "slo_s": 0,
        "modules": {"det": {"model": "nowhere-net"}, "cls": {"model": "cls-net"}},
        "edges": [["det", "ghost"], ["det", "cls", -1]],
        "hardware": ["t4", "tpu", "p100"],
        "profiles": {
            "cls-net": [
                {"hardware": "t4", "batch": 1, "duration_s": -0.1},
                {"hardware": "k80", "batch": 1, "duration_s": 0.1},
            ]
        },
        "sloo": 3,
    }
    got = problems_of(bad)
    want = [
        "unknown key 'sloo'",
        "name 'bad name!' must be",
        "slo_s must be > 0",
        "rate is required",
        "edge [det, ghost] names unknown module 'ghost'",
        "edge [det, cls] fan_out must be a number > 0",
        "hardware 'tpu' is not in the catalog",
        "hardware 'p100' has no EC2 instance type",
        "profiles.cls-net[0]: duration_s",
        "profiles.cls-net[1]: hardware 'k80' is not in the catalog",
        "unknown model 'nowhere-net'",
    ]
    for w in want:
        assert any(w in p for p in got), (w, got)
    assert len(got) == len(want)


def test_cycles_plannability_and_mappings() -> None:
    cyc = copy.deepcopy(SPEC) | {"edges": [["det", "cls"], ["cls", "det"]]}
    assert any("cycle through cls, det" in p for p in problems_of(cyc))
    tight = copy.deepcopy(SPEC) | {"slo_s": 0.01}
    (only,) = problems_of(tight)
    assert only.startswith("cannot be planned at 20 frames/s within slo_s 0.01")
    nowhere = copy.deepcopy(SPEC) | {"hardware": ["v100"]}
    assert any(
        "module 'det' (model det-net) has no profile on the usable hardware (v100)" in p
        for p in problems_of(nowhere)
    )
    # P100 is fine once mapped to an instance type, but only where a worker group exists
    p100 = copy.deepcopy(SPEC) | {"hardware": ["p100"], "instance_types": {"p100": "g4dn.2xlarge"}}
    assert any("hardware 'p100' has no worker group" in p for p in problems_of(p100, available=["t4"]))
    assert problems_of("just text") == ["the spec must be a mapping (a YAML or JSON object)"]


@pytest.mark.parametrize("bad", [-0.1, 0.5, 1, "10%", True])
def test_an_admission_reserve_outside_0_to_half_is_listed(bad: object) -> None:
    (only,) = problems_of(copy.deepcopy(SPEC) | {"admission_reserve": bad})
    assert only == f"admission_reserve must be a fraction of the SLO in [0, 0.5), got {bad!r}"


def test_an_admission_reserve_plans_for_less_than_the_slo() -> None:
    from control.problems import app_problem

    spec = validate_spec(
        copy.deepcopy(SPEC) | {"admission_reserve": 0.2}, catalog=CATALOG, stored_profile=lambda _m: None
    )
    assert spec.admission_reserve == 0.2
    assert spec.planning_slo_s == pytest.approx(0.8 * spec.slo_s)
    problem = app_problem(spec, spec.rate, CATALOG, None, 0.0)
    assert problem.slo_s == pytest.approx(spec.planning_slo_s)
    # the feasibility check plans for the shorter SLO, and says so
    # 0.03 s plans (above 0.02 s it does), 0.03 s less 40 % does not
    validate_spec(copy.deepcopy(SPEC) | {"slo_s": 0.03}, catalog=CATALOG, stored_profile=lambda _m: None)
    tight = copy.deepcopy(SPEC) | {"slo_s": 0.03, "admission_reserve": 0.4}
    (only,) = problems_of(tight)
    assert only.startswith(
        "cannot be planned at 20 frames/s within slo_s 0.03 less its admission_reserve (0.018 s)"
    )


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"shed_target": 0}, "shed_target must be a fraction of frames in (0, 0.5], got 0"),
        ({"shed_target": 0.6}, "shed_target must be a fraction of frames in (0, 0.5], got 0.6"),
        ({"shed_target": "1%"}, "shed_target must be a fraction of frames in (0, 0.5], got '1%'"),
        (
            {"shed_target": 0.01, "admission_reserve": 0.1},
            "give admission_reserve or shed_target, not both (shed_target chooses the reserve)",
        ),
    ],
)
def test_a_bad_shed_target_is_listed(extra: dict[str, Any], problem: str) -> None:
    assert problems_of(copy.deepcopy(SPEC) | extra) == [problem]


def test_a_shed_target_chooses_the_smallest_reserve_that_meets_it() -> None:
    from control.registration.checks import check_plannable
    from control.registration.reserve import simulated_shed

    # at 0.04 s the plan for the whole SLO sheds about 4 % of Poisson frames at 20 frames/s, and
    # 0.1 of the SLO kept for spilled frames still about 2 %
    reg = validate_registration(
        copy.deepcopy(SPEC) | {"slo_s": 0.04, "shed_target": 0.01},
        catalog=CATALOG,
        stored_profile=lambda _m: None,
        headroom=0.1,
    )
    spec = reg.spec
    assert spec.admission_reserve == 0.15 and spec.shed_target == 0.01
    assert spec.simulated_shed is not None and spec.simulated_shed <= 0.01
    assert reg.seed is not None
    for smaller in (0.0, 0.05, 0.1):
        candidate = spec.model_copy(update={"admission_reserve": smaller})
        plan = check_plannable(candidate, CATALOG, None, overhead_s=0.0, headroom=0.1)
        assert simulated_shed(candidate, plan, CATALOG, None, 0.0) > 0.01, smaller
    # the epoch plans for 85 % of the SLO: the seed's paths fit it
    paths = (reg.seed.model_extra or {})["paths"]
    assert all(p["worst_case_latency_s"] <= 0.85 * 0.04 + 1e-9 for p in paths)


def test_a_shed_target_no_reserve_meets_is_one_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    from control.registration import reserve

    sheds = iter([0.09, 0.05, 0.04, 0.03, 0.03, 0.02, 0.02])
    monkeypatch.setattr(reserve, "simulated_shed", lambda *_a: next(sheds))
    (only,) = problems_of(copy.deepcopy(SPEC) | {"shed_target": 0.01})
    assert only.startswith("shed_target 0.01 cannot be met: the least shed found was 0.02 of Poisson frames")
    assert "(admission_reserve 0.3)" in only


def test_models_resolve_from_the_profile_store_into_the_stored_spec() -> None:
    from profiles.store import default_store

    store = default_store()
    doc = {
        "name": "traffic2",
        "slo_s": 0.4,
        "rate": 4,
        "hardware": ["t4", "c6i.large"],
        "modules": {"detector": {"model": "ssdlite_mnv2"}},
    }
    spec = validate_spec(
        doc,
        catalog=CATALOG,
        stored_profile=lambda m: store.load_profile(m) if m in store.list_models() else None,
    )
    assert spec.profiles["ssdlite_mnv2"] == store.load_profile("ssdlite_mnv2")
    assert spec.floor_rate == pytest.approx(0.4)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Any:
    import boto3
    from moto import mock_aws

    from core.settings import DataPlaneConfig
    from skinflint.local.provision import create_base

    with mock_aws():
        cfg = DataPlaneConfig()
        ddb, s3 = boto3.client("dynamodb", region_name=cfg.region), boto3.client("s3", region_name=cfg.region)
        create_base(ddb, s3, cfg)
        yield cfg, ddb, s3


def test_cli_register_list_show_remove(aws: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from control.service import registry_and_state

    cfg, ddb, s3 = aws
    path = tmp_path / "cams.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    assert main(["apps", "register", str(path), "--dry-run"]) == 0
    assert "valid (2 modules); nothing stored" in capsys.readouterr().out
    assert registry_and_state(ddb, s3, cfg.config_table, cfg.bucket)[0].records() == []
    assert main(["apps", "register", str(path)]) == 0
    assert "registered cams revision 1" in capsys.readouterr().out
    assert main(["apps", "register", str(path), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["revision"] == 2 and rec["s3_key"] == "registry/apps/cams/r2.json"
    registry, _ = registry_and_state(ddb, s3, cfg.config_table, cfg.bucket)
    assert registry.replan_requested() == {"cams"}
    assert main(["apps", "list", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "cams" and row["planned"] is None
    assert main(["apps", "show", "cams", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spec"]["profiles"]["det-net"][0]["hardware"] == "t4"
    assert main(["apps", "show", "cams"]) == 0
    assert "edge det -> cls (fan-out 2)" in capsys.readouterr().out
    assert main(["apps", "remove", "cams"]) == 0
    assert registry.records() == []
    assert main(["apps", "show", "cams"]) == 1
    assert "no registered app named 'cams'" in capsys.readouterr().err


def test_cli_says_which_reserve_a_shed_target_chose(
    aws: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKINFLINT_HOP_OVERHEAD_S", "0")  # the durations as profiled, as above
    monkeypatch.setenv("SKINFLINT_PLANNER_HEADROOM", "0.1")
    path = tmp_path / "cams.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(SPEC) | {"slo_s": 0.04, "shed_target": 0.01}))
    assert main(["apps", "register", str(path)]) == 0
    out = capsys.readouterr().out
    assert "admission reserve 0.15 of the SLO (planned for the rest), chosen for shed_target 0.01: " in out
    assert "of Poisson frames shed at the registered rate in the simulator" in out
    assert main(["apps", "show", "cams"]) == 0
    text = capsys.readouterr().out
    assert "admission reserve 0.15 of the SLO" in text and "in force" not in text
    # a reserve the control loop chose again for this revision is shown beside the registered one
    from control.state import ControlState, ReserveChoice, StateStore
    from core.adapters.config_items import ConfigItems

    cfg, ddb, _s3 = aws
    choice = ReserveChoice(reserve=0.3, rate=40.0, shed=0.002, met=True, revision=1, at=0.0)
    StateStore(ConfigItems(ddb, cfg.config_table)).save(
        ControlState(epoch=1, reserves={"cams": choice}), None
    )
    assert main(["apps", "show", "cams"]) == 0
    assert (
        "in force: admission reserve 0.3, chosen again by the control loop at 40 frames/s: 0.20 % shed"
        in capsys.readouterr().out
    )
    assert main(["apps", "show", "cams", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["reserve_in_force"] == {"reserve": 0.3, "rate": 40.0, "shed": 0.002, "met": True}
    assert main(["apps", "list", "--json"]) == 0
    capsys.readouterr()


def test_cli_invalid_spec_is_one_line_listing_every_problem(
    aws: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "slo_s": -1, "modules": {"a": {"model": "m"}}}))
    assert main(["apps", "register", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("skinflint: error: ")
    assert "3 problems: slo_s must be > 0, got -1; rate is required; module 'a': unknown model 'm'" in err
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    assert main(["apps", "register", str(tmp_path / "broken.yaml")]) == 1
    assert "neither JSON nor YAML" in capsys.readouterr().err
    assert main(["apps", "register", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_admin_api_registers_with_an_admin_key(aws: Any) -> None:
    from control.service import registry_and_state
    from core.adapters.config_store import ConfigStore
    from front.admin import admin_from_config
    from front.app import create_app

    cfg, ddb, s3 = aws
    store = ConfigStore(ddb, cfg.config_table)
    store.put_admin_key("admin-1", "tests")
    store.put_api_key("frames-1", "tests")
    # no frame service here: the document is read without the key (SKINFLINT_FRONT_DOCS=public)
    client = TestClient(create_app(lambda: None, lambda: admin_from_config(cfg), docs="public"))  # type: ignore[arg-type,return-value]
    body = json.dumps(SPEC)
    assert client.post("/v1/apps", content=body).json()["error"] == "missing_admin_key"
    r = client.post(
        "/v1/apps", content=body, headers={"x-admin-key": "frames-1"}
    )  # a frame key is not an admin key
    assert r.status_code == 403 and r.json()["error"] == "wrong_admin_key"
    bad = client.post(
        "/v1/apps",
        content=json.dumps(SPEC | {"slo_s": 0, "rate": "fast"}),
        headers={"x-admin-key": "admin-1"},
    )
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_app"
    assert bad.json()["problems"] == ["slo_s must be > 0, got 0", "rate must be a number, got 'fast'"]
    ok = client.post(
        "/v1/apps",
        content=yaml.safe_dump(SPEC),
        headers={"x-admin-key": "admin-1", "content-type": "application/yaml"},
    )
    assert ok.status_code == 201, ok.json()
    assert ok.json()["name"] == "cams" and ok.json()["revision"] == 1 and ok.json()["planning"] == "requested"
    registry, _ = registry_and_state(ddb, s3, cfg.config_table, cfg.bucket)
    assert [r.name for r in registry.records()] == ["cams"] and registry.replan_requested() == {"cams"}
    assert (
        client.post("/v1/apps", content=b"", headers={"x-admin-key": "admin-1"}).json()["error"]
        == "empty_body"
    )
    assert "/v1/apps" in client.get("/openapi.json").json()["paths"]
