"""``skinflint plan APP --rate R``'s all-in bill (docs/cost.md): fleet, data plane itemised and all-in
$/h and $ per million frames; ``--objective all-in`` picks the batch floor of least fleet + data plane;
bad input is one line and exit 1."""

from __future__ import annotations

import json
from typing import Any

import pytest

from control.preview import AllInSpec, preview_app
from control.spec import profile_lookup
from profiles.allin import PER_TASK
from profiles.aws_prices import load_aws_prices
from profiles.store import PACKAGE_ROOT, LocalStore
from skinflint.cli import main

STORE = LocalStore(PACKAGE_ROOT)


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["plan", *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_the_json_itemises_the_data_plane_and_adds_it_to_the_fleet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = plan_json(capsys, "traffic", "--rate", "200", "--policy", "per_task", "--frames-per-post", "10")
    assert doc["data_plane_policy"] == "per_task" and doc["frames_per_post"] == 10 and doc["frame_kb"] == 8
    assert doc["all_in_per_hour"] == pytest.approx(
        doc["fleet_per_hour"] + doc["data_plane_per_hour"], abs=1e-5
    )
    items = doc["data_plane"]
    assert set(items) == {"api_gateway", "waf", "lambda", "sqs", "dynamodb", "s3", "logs_metrics", "fixed"}
    assert sum(v["per_hour"] for v in items.values()) == pytest.approx(doc["data_plane_per_hour"], abs=1e-4)
    # $ per million frames: $/h over 200 frames/s x 3,600 s
    assert doc["all_in_per_million_frames"] == pytest.approx(doc["all_in_per_hour"] / (200 * 3600) * 1e6)
    assert doc["cost_scope"].startswith("EC2 fleet only")  # fleet_per_hour is still the fleet alone
    assert all(e["as_of"] and e["source"] for e in doc["data_plane_prices"]["entries"].values())
    assert doc["objective_all_in"] is False and doc["batch_floor_candidates"] == []


def test_pricing_the_data_plane_leaves_the_plan_as_it_was() -> None:
    doc = STORE.load_app("traffic").model_dump(mode="json", exclude_none=True)
    kwargs: dict[str, Any] = {"catalog": STORE.load_catalog(), "stored_profile": profile_lookup(STORE)}
    bare = preview_app(doc, 300, **kwargs)
    priced = preview_app(doc, 300, all_in=AllInSpec(PER_TASK, load_aws_prices(), 8.0, 10), **kwargs)
    assert priced.plan.model_dump(exclude={"solve_ms", "solve_cpu_ms"}) == bare.plan.model_dump(
        exclude={"solve_ms", "solve_cpu_ms"}
    )
    assert priced.fleet_per_hour == bare.fleet_per_hour and bare.data_plane is None


def test_the_all_in_objective_never_costs_more_than_the_fleet_only_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    common = ("traffic", "--rate", "50", "--policy", "today")
    fleet_only = plan_json(capsys, *common)
    all_in = plan_json(capsys, *common, "--objective", "all-in")
    # floor 1 (the fleet-only plan) is among the candidates, so the chosen one is no dearer
    assert all_in["all_in_per_hour"] <= fleet_only["all_in_per_hour"] + 1e-9
    rows = all_in["batch_floor_candidates"]
    assert rows[0]["min_batch"] == 1 and rows[0]["all_in_per_hour"] == pytest.approx(
        fleet_only["all_in_per_hour"]
    )
    chosen = [row for row in rows if row["chosen"]]
    assert len(chosen) == 1 and chosen[0]["all_in_per_hour"] == pytest.approx(all_in["all_in_per_hour"])
    assert chosen[0]["all_in_per_hour"] == min(row["all_in_per_hour"] for row in rows if row["planned"])


def test_the_table_shows_the_all_in_bill(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "face", "--rate", "100"]) == 0
    out = capsys.readouterr().out
    assert "all-in bill: data plane 'today', 8 KB frames, 10 per POST" in out  # clients post batches
    for row in ("EC2 fleet", "dynamodb", "data plane", "all-in"):
        assert row in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--frame-kb", "0"], "--frame-kb must be a number of KB > 0, got 0"),
        (["--frame-kb", "-3"], "--frame-kb must be a number of KB > 0, got -3"),
        (["--frames-per-post", "11"], "--frames-per-post must be 1 to 10"),
        (["--frames-per-post", "0"], "--frames-per-post must be 1 to 10"),
        (["--policy", "cheap"], "--policy cheap: with --rate the policy is the data plane's design"),
        (["--objective", "occupancy"], "an app is planned billed (the fleet) or all-in"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["plan", "traffic", "--rate", "100", *extra]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_all_in_objective_needs_a_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "examples/harpagon_m1.json", "--objective", "all-in"]) == 1
    assert "--objective all-in prices the data plane at a frame rate" in capsys.readouterr().err


def test_an_app_that_pushes_its_results_is_priced_with_its_results_queue(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    doc = STORE.load_app("traffic").model_dump(mode="json", exclude_none=True)
    spec = tmp_path / "pushed.json"
    spec.write_text(json.dumps({**doc, "name": "pushed", "results": "push"}))
    pulled = plan_json(capsys, "traffic", "--rate", "1000")
    pushed = plan_json(capsys, str(spec), "--rate", "1000")
    assert (pulled["data_plane_policy"], pushed["data_plane_policy"]) == ("today", "today_push")
    assert pushed["data_plane"]["dynamodb"]["per_hour"] < pulled["data_plane"]["dynamodb"]["per_hour"]
