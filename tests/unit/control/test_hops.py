"""Measured hops (control/hops.py, core/hops.py): the hop each module is planned with, by hand."""

from __future__ import annotations

import math

import pytest

from control.config import ControlConfig
from control.hops import HopSettings, decide_hop, learn_hops, plan_hops
from control.problems import adjust_profiles
from control.state import ControlState
from core.hops import bucket_label, quantile_ms

S = HopSettings(default_s=0.05, floor_s=0.02, min_samples=100, band_s=0.01)


def test_bucket_labels_round_a_delay_up_to_its_bound() -> None:
    assert bucket_label(0.0) == "5" and bucket_label(5.0) == "5" and bucket_label(5.01) == "10"
    assert bucket_label(37.0) == "40" and bucket_label(101.0) == "120" and bucket_label(6000.0) == "inf"


def test_the_p99_of_a_histogram_is_its_bucket_bound() -> None:
    # 200 deliveries: 190 up to 25 ms, 8 up to 40 ms, 2 up to 120 ms. The p99's rank is
    # ceil(0.99 * 200) = 198: 190 + 8 = 198 deliveries are <= 40 ms, so the p99 is 40 ms
    assert quantile_ms({"25": 190, "40": 8, "120": 2}) == (200, 40.0)
    # one more slow one (201 deliveries): rank ceil(198.99) = 199 > 198, so it lies in the 120 ms bucket
    assert quantile_ms({"25": 190, "40": 8, "120": 3}) == (201, 120.0)
    assert quantile_ms({}) == (0, 0.0)
    assert quantile_ms({"25": 99, "inf": 2}) == (101, math.inf)


def test_too_few_samples_keep_the_default_or_the_hop_in_force() -> None:
    # 99 deliveries < min_samples 100: a never-measured module stays on the 0.05 s default ...
    assert decide_hop(None, 99, 0.2, S) == (0.05, "default")
    # ... and a measured one keeps its hop (a quiet window does not move the plan)
    assert decide_hop(0.035, 99, 0.2, S) == (0.035, "kept")
    assert decide_hop(0.035, 0, 0.0, S) == (0.035, "kept")


def test_a_measured_p99_above_the_floor_is_planned_rounded_up_to_5_ms() -> None:
    # p99 0.083 s from 500 deliveries: above the 0.05 default, planned as ceil(83 / 5) * 5 ms = 0.085 s
    assert decide_hop(None, 500, 0.083, S) == (pytest.approx(0.085), "measured")


def test_a_measured_p99_below_the_floor_is_planned_at_the_floor() -> None:
    # p99 8 ms: max(0.008 -> 0.01, floor 0.02) = 0.02 s; 0.02 is 0.03 below the 0.05 default,
    # more than the 0.01 band, so it moves
    assert decide_hop(None, 500, 0.008, S) == (pytest.approx(0.02), "measured")


def test_the_band_keeps_a_hop_that_a_wavering_p99_would_move() -> None:
    # in force 0.05 s; p99 0.045 s: 0.005 below, within the 0.01 band: kept
    assert decide_hop(0.05, 500, 0.045, S) == (0.05, "kept")
    # p99 0.04 s: exactly 0.01 below, within the band: kept
    assert decide_hop(0.05, 500, 0.04, S) == (0.05, "kept")
    # p99 0.035 s: 0.015 below, past the band: it moves down to 0.035
    assert decide_hop(0.05, 500, 0.035, S) == (pytest.approx(0.035), "measured")
    # p99 0.052 s: rounded up to 0.055, above the 0.05 in force: it moves up at once (an
    # under-planned hop breaks the worst case)
    assert decide_hop(0.05, 500, 0.052, S) == (pytest.approx(0.055), "measured")
    # p99 0.05 s is the hop in force: kept
    assert decide_hop(0.05, 500, 0.05, S) == (0.05, "kept")
    # a p99 above the histogram's last bound is a stalled consumer, not a hop: kept
    assert decide_hop(0.05, 500, math.inf, S) == (0.05, "kept")


def test_plan_hops_reports_every_module_and_keeps_only_measured_ones() -> None:
    counts = {"det": {"25": 190, "40": 8, "120": 2}, "car": {"25": 10}}
    hops, report = plan_hops({}, counts, ["det", "car", "cls"], S)
    # det: 200 samples, p99 40 ms -> 0.04 s, 0.01 below the 0.05 default: within the band, so on
    # the default still; car: 10 samples; cls: none
    assert hops == {}
    assert report["det"] == {"hop_s": 0.05, "source": "default", "samples": 200, "p99_s": 0.04}
    assert report["car"]["samples"] == 10 and report["car"]["source"] == "default"
    assert report["cls"] == {"hop_s": 0.05, "source": "default", "samples": 0}
    # det's slow tail grows (3 of 201 at 120 ms): p99 0.12 s -> measured
    hops, report = plan_hops({}, {"det": {"25": 190, "40": 8, "120": 3}}, ["det"], S)
    assert hops == {"det": pytest.approx(0.12)} and report["det"]["source"] == "measured"


def test_learn_hops_keeps_state_between_epochs_and_forgets_gone_apps() -> None:
    state = ControlState(hops={"old": {"m": 0.03}})
    fast = {("cams", "det"): {"15": 300}}  # p99 15 ms -> max(0.015, floor 0.02) = 0.02
    reports = learn_hops(state, {"cams": ["det", "car"]}, fast, S)
    assert state.hops == {"cams": {"det": pytest.approx(0.02)}}
    assert reports["cams"]["det"]["source"] == "measured" and reports["cams"]["car"]["source"] == "default"
    # a quiet epoch: det keeps its 0.02 (kept), not the default
    learn_hops(state, {"cams": ["det", "car"]}, {}, S)
    assert state.hops == {"cams": {"det": pytest.approx(0.02)}}


def test_adjust_profiles_plans_each_module_with_its_own_hop() -> None:
    from planner.models import ProblemSpec

    problem = ProblemSpec.model_validate(
        {
            "name": "x",
            "slo_s": 1.0,
            "hardware": {"t4": {"price_per_hour": 0.5}},
            "modules": {
                m: {"rate": 10.0, "profile": [{"hardware": "t4", "batch": 1, "duration_s": 0.01}]}
                for m in ("det", "car")
            },
            "edges": [["det", "car"]],
        }
    )
    out = adjust_profiles(problem, 0.05, hop_as_latency=True, hops={"car": 0.085})
    # det on the 0.05 default, car on its measured 0.085; the device time stays 0.01 for both
    assert out.modules["det"].profile[0].overhead_s == pytest.approx(0.05)
    assert out.modules["car"].profile[0].overhead_s == pytest.approx(0.085)
    assert all(m.profile[0].duration_s == pytest.approx(0.01) for m in out.modules.values())


def test_the_hop_settings_come_from_the_environment() -> None:
    cfg = ControlConfig.from_env(
        {
            "SKINFLINT_HOP_OVERHEAD_S": "0.04",
            "SKINFLINT_HOP_MIN_SAMPLES": "50",
            "SKINFLINT_HOP_BAND_S": "0.02",
        }
    )
    assert cfg.hop_settings() == HopSettings(default_s=0.04, floor_s=0.02, min_samples=50, band_s=0.02)
    assert cfg.measure_hops and not ControlConfig.from_env({"SKINFLINT_MEASURE_HOPS": "0"}).measure_hops
    with pytest.raises(ValueError, match="hop_min_samples"):
        ControlConfig(hop_min_samples=0)
