"""The cost report's arithmetic (pure: series in, figures out)."""

from __future__ import annotations

import math

import pytest

from core.adapters.outcomes import LATENCY_BUCKETS_MS, bucket_label
from skinflint.report.cloudwatch import Series
from skinflint.report.model import ReportInput, compute_report, latency_cdf, quantile_from_cdf
from skinflint.report.plans import PlanHistory, PlannedVersion


@pytest.mark.parametrize(
    ("ms", "label"), [(0.0, "25"), (25.0, "25"), (25.1, "50"), (400.0, "400"), (401.0, "450"), (1e6, "inf")]
)
def test_bucket_labels_are_upper_edges(ms, label):
    assert bucket_label(ms) == label


def test_cdf_and_quantiles_from_bucket_counts():
    # 90 frames at <= 200 ms, 9 at <= 450 ms, 1 above 10 s
    cdf = latency_cdf({"200": 90, "450": 9, "inf": 1})
    assert len(cdf) == len(LATENCY_BUCKETS_MS) + 1
    assert dict(cdf)[200] == pytest.approx(0.9) and dict(cdf)[450] == pytest.approx(0.99)
    assert quantile_from_cdf(cdf, 0.5) == 200
    assert quantile_from_cdf(cdf, 0.99) == 450
    assert math.isinf(quantile_from_cdf(cdf, 1.0))
    assert latency_cdf({}) == []


def series(name, stat, points, **dims):
    return Series(name, dims, stat, dict(points))


def test_steady_state_uses_interior_periods_and_follows_replanning():
    # GIVEN instance-seconds of one t4 (0.5 USD/h) over 5 one-minute periods, the first and last
    # partial, and a plan of 1 instance re-planned to 2 from the fourth period
    p = 60
    inst = series(
        "InstanceSeconds", "Sum", {0: 20.0, 60: 60.0, 120: 60.0, 180: 120.0, 240: 30.0}, Hardware="t4"
    )
    plans = PlanHistory(
        [PlannedVersion(1, 0.0, 0.5, 0.25), PlannedVersion(2, 180.0, 1.0, 0.5)], {}, "plan store"
    )
    r = compute_report(ReportInput(0.0, 300.0, p, [], {"t4": 0.5}, [inst], plans))
    f = r["fleet"]
    assert [x["planned_per_hour"] for x in f["timeline"]] == [0.5, 0.5, 0.5, 1.0, 1.0]
    # interior periods 60, 120, 180: observed 0.5, 0.5, 1.0 -> 0.6667; planned the same
    assert f["interior_periods"] == 3
    assert f["observed_per_hour_steady"] == pytest.approx(2 / 3)
    assert f["deviation_steady"] == pytest.approx(0.0, abs=1e-12)
    # the window: 290 instance-seconds x 0.5 USD/h against 3.5 planned period-hours x ... (partial edges)
    assert f["observed_usd"] == pytest.approx(290 * 0.5 / 3600)
    assert f["deviation_window"] < 0  # the partial first and last periods are billed less than planned


def test_missing_prices_and_plans_are_reported_not_guessed():
    inst = series("InstanceSeconds", "Sum", {0: 60.0}, App="a", Module="m", Hardware="x9")
    r = compute_report(ReportInput(0.0, 60.0, 60, ["a"], {}, [inst], PlanHistory([], {}, "none")))
    assert any("no price for x9" in n for n in r["notes"])
    assert any("no plan found" in n for n in r["notes"])
    assert r["fleet"]["planned_per_hour_steady"] is None and r["apps"]["a"]["planned_billed_per_hour"] is None
