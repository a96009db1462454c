"""The data plane's AWS request bill in the report (pure: series and a price table in, figures out)
and the price table's loader (``profiles/aws_prices.json``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from profiles.aws_prices import AWS_PRICES_PATH, AwsPrices, load_aws_prices
from profiles.errors import StoreError
from skinflint.report.cloudwatch import Series
from skinflint.report.dataplane import data_plane
from skinflint.report.model import ReportInput, compute_report
from skinflint.report.plans import PlanHistory

if TYPE_CHECKING:
    from pathlib import Path

P = 60  # s per period

# round prices for the hand arithmetic
TABLE: dict[str, Any] = {
    "region": "us-east-1",
    "as_of": "2025-01",
    "currency": "USD",
    "source": "test figures",
    "services": {
        "dynamodb": {
            "ReadRequestUnits": {"usd": 0.125, "per": 1_000_000},
            "WriteRequestUnits": {"usd": 0.625, "per": 1_000_000},
        },
        "sqs": {"Requests": {"usd": 0.40, "per": 1_000_000}},
        "apigateway": {"Requests": {"usd": 3.50, "per": 1_000_000}},
        "wafv2": {"Requests": {"usd": 0.60, "per": 1_000_000, "of": "apigateway.Requests"}},
        "lambda": {
            "Requests": {"usd": 0.20, "per": 1_000_000},
            "GBSeconds": {"usd": 0.0000166667, "per": 1},
        },
    },
}


def req(comp: str, service: str, op: str, points: dict[float, float]) -> Series:
    return Series("AwsRequests", {"Component": comp, "Service": service, "Operation": op}, "Sum", points)


def units(comp: str, service: str, unit: str, points: dict[float, float]) -> Series:
    return Series("AwsRequestUnits", {"Component": comp, "Service": service, "Unit": unit}, "Sum", points)


def two_minutes() -> list[Series]:
    """2 periods of a front and a worker: 1,000 frames accepted in 1,000 POSTs."""
    return [
        req("front", "apigateway", "POST /v1/apps/{app_name}/frames", {0: 500, 60: 500}),
        units("front", "apigateway", "Requests", {0: 500, 60: 500}),
        req("front", "lambda", "Invocation", {0: 500, 60: 500}),
        units("front", "lambda", "Requests", {0: 500, 60: 500}),
        units("front", "lambda", "DurationMs", {0: 10_000, 60: 10_000}),  # 20 ms per POST
        req("front", "dynamodb", "BatchWriteItem", {0: 500, 60: 500}),
        units("front", "dynamodb", "WriteRequestUnits", {0: 1_000, 60: 1_000}),
        req("worker", "dynamodb", "BatchGetItem", {0: 3_000, 60: 3_000}),
        units("worker", "dynamodb", "ReadRequestUnits", {0: 4_000, 60: 4_000}),
        req("worker", "sqs", "ReceiveMessage", {0: 1_000, 60: 1_000}),
        req("front", "sqs", "SendMessageBatch", {0: 500, 60: 500}),
        units("worker", "sqs", "Requests", {0: 1_000, 60: 1_000}),
        units("front", "sqs", "Requests", {0: 500, 60: 500}),
        req("instance", "autoscaling", "CompleteLifecycleAction", {60: 1}),
        req("instance", "dynamodb", "DeleteItem", {}),  # listed by ListMetrics, no point in the window
        units("instance", "s3", "GetClassRequests", {}),
    ]


def test_each_service_priced_per_unit_per_hour_and_per_1000_frames():
    prices = AwsPrices.model_validate(TABLE)
    dp = data_plane(two_minutes(), prices, period_s=P, frames=1_000, front_memory_mb=1024)
    svc = dp["services"]
    # apigateway: 1,000 requests x 3.50 / 1e6 = 0.0035 USD; over 2 min -> 0.105 USD/h
    assert svc["apigateway"]["usd"] == pytest.approx(0.0035)
    assert svc["apigateway"]["usd_per_hour"] == pytest.approx(0.0035 * 30)
    assert svc["apigateway"]["usd_per_1000_frames"] == pytest.approx(0.0035)
    assert svc["apigateway"]["operations"]["POST /v1/apps/{app_name}/frames"]["requests"] == 1_000
    # WAF: one inspected request per API request: 1,000 x 0.60 / 1e6
    assert svc["wafv2"]["billed_units"] == {"Requests": 1_000} and svc["wafv2"]["requests"] == 1_000
    assert svc["wafv2"]["usd"] == pytest.approx(0.0006)
    # lambda: 1,000 x 0.20 / 1e6 + 20 s x 1 GB x 0.0000166667 = 0.0002 + 0.000333334
    assert svc["lambda"]["billed_units"] == pytest.approx({"Requests": 1_000, "GBSeconds": 20.0})
    assert svc["lambda"]["units"]["DurationMs"] == 20_000  # as counted
    assert svc["lambda"]["usd"] == pytest.approx(0.0002 + 20 * 0.0000166667)
    # dynamodb: 2,000 WRU x 0.625 / 1e6 + 8,000 RRU x 0.125 / 1e6 = 0.00125 + 0.001
    assert svc["dynamodb"]["usd_by_unit"] == pytest.approx(
        {"WriteRequestUnits": 0.00125, "ReadRequestUnits": 0.001}
    )
    assert svc["dynamodb"]["requests"] == 7_000 and "DeleteItem" not in svc["dynamodb"]["operations"]
    assert "s3" not in svc  # nothing in the window: no row
    assert svc["dynamodb"]["operations"]["BatchGetItem"]["by_component"] == {"worker": 6_000}
    # sqs: 3,000 x 0.40 / 1e6
    assert svc["sqs"]["usd"] == pytest.approx(0.0012)
    # autoscaling: a request, no unit, no price, no note
    assert svc["autoscaling"]["requests"] == 1 and svc["autoscaling"]["usd"] == 0.0 and dp["unpriced"] == []
    total = 0.0035 + 0.0006 + 0.0002 + 20 * 0.0000166667 + 0.00225 + 0.0012
    assert dp["usd"] == pytest.approx(total)
    assert dp["usd_per_1000_frames"] == pytest.approx(total)  # 1,000 frames
    assert dp["usd_per_hour"] == pytest.approx(total * 30)  # 2 minutes
    assert dp["requests"] == 1_000 + 1_000 + 7_000 + 3_000 + 1  # WAF's inspections are not requests of ours
    assert dp["components"]["front"]["usd"] == pytest.approx(
        total - 0.001 - 0.0008
    )  # the worker's reads, sqs
    assert dp["priced_at"] == "us-east-1 list prices as of 2025-01"
    assert list(dp["services"])[0] == "apigateway"  # the largest first


def test_the_report_adds_the_data_plane_to_the_fleets_bill():
    # GIVEN one t4 at 0.5 USD/h for the same 2 minutes (0.01667 USD) and 1,000 frames
    inst = Series("InstanceSeconds", {"Hardware": "t4", "State": "serving"}, "Sum", {0: 60.0, 60: 60.0})
    frames = Series("FramesAccepted", {"App": "traffic"}, "Sum", {0: 500.0, 60: 500.0})
    r = compute_report(
        ReportInput(
            0.0, 120.0, P, ["traffic"], {"t4": 0.5}, [inst, frames, *two_minutes()], PlanHistory([], {}, "none"),
            aws_prices=AwsPrices.model_validate(TABLE), front_memory_mb=1024,
        )
    )  # fmt: skip
    dp, t = r["data_plane"], r["total"]
    fleet_usd = 120 * 0.5 / 3600
    assert t["fleet_usd"] == pytest.approx(fleet_usd) and t["data_plane_usd"] == pytest.approx(dp["usd"])
    assert t["usd"] == pytest.approx(fleet_usd + dp["usd"])
    assert t["usd_per_hour"] == pytest.approx(0.5 + dp["usd_per_hour"])
    assert t["fleet_usd_per_1000_frames"] == pytest.approx(fleet_usd)  # 1,000 frames
    assert t["usd_per_1000_frames"] == pytest.approx(fleet_usd + dp["usd"])
    assert t["data_plane_share"] == pytest.approx(dp["usd"] / (fleet_usd + dp["usd"]))
    assert not any("AWS" in n or "data plane" in n for n in r["notes"])


def test_counted_but_not_priced_is_said_not_guessed():
    series = [*two_minutes(), units("worker", "s3", "GetClassRequests", {0: 10.0})]
    r = compute_report(
        ReportInput(0.0, 120.0, P, [], {}, series, PlanHistory([], {}, "none"),
                    aws_prices=AwsPrices.model_validate(TABLE), front_memory_mb=None)
    )  # fmt: skip
    assert any("no AWS price for s3 GetClassRequests: counted as 0" in n for n in r["notes"])
    assert any("memory size is unknown" in n for n in r["notes"])
    assert "GBSeconds" not in r["data_plane"]["services"]["lambda"]["billed_units"]
    # without a table: counted, no USD
    r = compute_report(ReportInput(0.0, 120.0, P, [], {}, series, PlanHistory([], {}, "none")))
    assert r["data_plane"]["usd"] is None and r["data_plane"]["services"]["sqs"]["requests"] == 3_000
    assert r["total"]["data_plane_usd"] is None
    assert any("counted, not priced" in n for n in r["notes"])
    # no metrics at all
    r = compute_report(ReportInput(0.0, 120.0, P, [], {}, [], PlanHistory([], {}, "none")))
    assert r["data_plane"]["services"] == {} and any("no AwsRequests metrics" in n for n in r["notes"])


# -- the price table -------------------------------------------------------------------------------------
def test_the_packaged_table_prices_what_the_components_count():
    prices = load_aws_prices()
    assert prices.region == "us-east-1" and prices.as_of and "by hand" in prices.source
    # the November 2024 cut of DynamoDB's on-demand prices
    assert prices.price("dynamodb", "WriteRequestUnits").cost(1e6) == pytest.approx(0.625)
    assert prices.price("dynamodb", "ReadRequestUnits").cost(1e6) == pytest.approx(0.125)
    assert prices.price("apigateway", "Requests").cost(1e6) == pytest.approx(3.50)  # REST API
    for service, unit in [
        ("sqs", "Requests"), ("monitoring", "Requests"), ("monitoring", "MetricsRequested"),
        ("s3", "PutClassRequests"), ("s3", "GetClassRequests"), ("lambda", "Requests"), ("lambda", "GBSeconds"),
    ]:  # fmt: skip
        assert prices.price(service, unit) is not None, (service, unit)
    assert prices.derived() == [("wafv2", "Requests", "apigateway", "Requests")]


def test_the_front_is_priced_as_the_api_it_is_deployed_behind():
    from cdk.constants import REPO_ROOT
    from cdk.stacks.front import FrontStackProps

    stack = (REPO_ROOT / "cdk" / "stacks" / "front.py").read_text()
    # both APIs exist; the HTTP API is the default, and the front is told which one it is behind
    assert "apigw.RestApi(" in stack and "apigwv2.HttpApi(" in stack
    assert FrontStackProps.__dataclass_fields__["front_api"].default == "http"
    assert '"SKINFLINT_FRONT_API": props.front_api' in stack


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("as_of"), r"as_of: Field required"),
        (lambda d: d.update(as_of="last year"), r"as_of: Value error, as_of must be a date"),
        (lambda d: d["services"]["sqs"]["Requests"].update(usd=-1), r"services\.sqs\.Requests\.usd"),
        (lambda d: d["services"]["sqs"]["Requests"].update(per=0), r"services\.sqs\.Requests\.per"),
        (lambda d: d["services"]["wafv2"]["Requests"].update(of="api"), r"'of' must name a counted unit"),
        (lambda d: d["services"]["sqs"]["Requests"].update(usd_per=1), r"usd_per: Extra inputs"),
        (lambda d: d.update(currency="EUR"), r"currency"),
    ],
)
def test_a_malformed_table_is_one_line_naming_the_file_and_the_problem(tmp_path: Path, change, message):
    doc = json.loads(json.dumps(TABLE))
    change(doc)
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(StoreError, match=message) as err:
        load_aws_prices(path)
    assert str(err.value).startswith(f"{path}: malformed AWS price table: ") and "\n" not in str(err.value)


def test_an_unreadable_table_is_one_line(tmp_path: Path):
    bad = tmp_path / "prices.json"
    bad.write_text("{not json")
    with pytest.raises(StoreError, match="cannot read the AWS price table"):
        load_aws_prices(bad)
    with pytest.raises(StoreError, match="cannot read the AWS price table"):
        load_aws_prices(tmp_path / "missing.json")
    assert AWS_PRICES_PATH.name == "aws_prices.json"


def test_the_cli_refuses_a_malformed_table_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from skinflint.cli import main

    bad = tmp_path / "prices.json"
    bad.write_text("[]")
    assert main(["report", "--aws-prices", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("skinflint: error: ") and "malformed AWS price table" in err and "\n" not in err
