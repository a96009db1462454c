"""Service-time corrections (control/calibration.py): pure arithmetic."""

from __future__ import annotations

import pytest

from control.calibration import CAP_S, update_corrections


def test_an_overrun_becomes_a_correction_rounded_up_to_the_grid():
    assert update_corrections({}, {("det", "t4"): 0.0312}) == {"det@t4": pytest.approx(0.035)}


def test_slack_alone_makes_no_correction():
    assert update_corrections({}, {("det", "t4"): -0.02}) == {}


def test_a_working_correction_is_kept_not_chased():
    # the plan in force carries 35 ms; the workers now finish 5 ms early: the bare model still
    # overruns by 30 ms, so the correction stays
    assert update_corrections({"det@t4": 0.035}, {("det", "t4"): -0.005}) == {"det@t4": 0.035}


def test_a_correction_grows_at_once_and_shrinks_only_after_three_low_epochs():
    assert update_corrections({"det@t4": 0.035}, {("det", "t4"): 0.02}) == {"det@t4": pytest.approx(0.055)}
    # the bare overrun fell below half of the correction: kept for two epochs, then the largest of
    # the three low figures, on the grid
    low: dict[str, list[float]] = {}
    cur = {"det@t4": 0.035}
    for obs in (-0.025, -0.03):
        assert update_corrections(cur, {("det", "t4"): obs}, low=low) == cur
    assert update_corrections(cur, {("det", "t4"): -0.028}, low=low) == {"det@t4": pytest.approx(0.01)}
    assert low == {}
    # a figure above half breaks the streak
    low = {}
    update_corrections(cur, {("det", "t4"): -0.03}, low=low)
    update_corrections(cur, {("det", "t4"): -0.01}, low=low)
    assert low == {}
    # and a bare model with slack ends at nothing
    for _ in range(3):
        cur = update_corrections(cur, {("det", "t4"): -0.04}, low=low)
    assert cur == {}


def test_keys_without_data_keep_their_correction_and_the_cap_holds():
    out = update_corrections({"cls@c6i.large": 0.01}, {("det", "t4"): 5.0})
    assert out == {"cls@c6i.large": 0.01, "det@t4": CAP_S}


def test_the_overrun_is_read_against_the_correction_the_workers_ran_with():
    # learned 150 ms, but the plan in force (not republished) still carries 25 ms: a 60 ms overrun
    # means the bare model overruns by 85 ms (kept at 150), not 210 ms
    out = update_corrections({"det@t4": 0.15}, {("det", "t4"): 0.06}, {("det", "t4"): 0.025})
    assert out == {"det@t4": pytest.approx(0.15)}
    low: dict[str, list[float]] = {}
    out = update_corrections({"det@t4": 0.15}, {("det", "t4"): -0.02}, {("det", "t4"): 0.025}, low=low)
    assert out == {"det@t4": pytest.approx(0.15)} and low == {"det@t4": [pytest.approx(0.005)]}


def test_calibration_is_opt_in():
    from control.epoch import ControlConfig

    assert ControlConfig().calibrate is False
    assert ControlConfig.from_env({}).calibrate is False
    assert ControlConfig.from_env({"SKINFLINT_CALIBRATE": "1"}).calibrate is True
