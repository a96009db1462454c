"""The planner function's settings: the dispatch-aware solve and the backlog correction knobs."""

from __future__ import annotations

import pytest

from control.epoch import ControlConfig
from control.errors import ControlError


def test_defaults_and_environment() -> None:
    c = ControlConfig.from_env({})
    assert (c.child_headroom, c.backlog_cooldown_s, c.backlog_min_boost, c.backlog_max_boost) == (
        0.0,
        60.0,
        0.1,
        1.0,
    )
    c = ControlConfig.from_env(
        {
            "SKINFLINT_CHILD_HEADROOM": "0.25",
            "SKINFLINT_BACKLOG_COOLDOWN_S": "30",
            "SKINFLINT_BACKLOG_MAX_BOOST": "0.5",
        }
    )
    assert (c.child_headroom, c.backlog_cooldown_s, c.backlog_max_boost) == (0.25, 30.0, 0.5)
    assert ControlConfig.from_env({}).rate_lag_s == 5.0
    assert ControlConfig.from_env({"SKINFLINT_RATE_LAG_S": "2.5"}).rate_lag_s == 2.5


@pytest.mark.parametrize(
    "env",
    [
        {"SKINFLINT_CHILD_HEADROOM": "-0.1"},
        {"SKINFLINT_CHILD_HEADROOM": "inf"},
        {"SKINFLINT_BACKLOG_MAX_BOOST": "0.05"},  # below the 10 % minimum step
        {"SKINFLINT_BACKLOG_MAX_BOOST": "lots"},
        {"SKINFLINT_RATE_LAG_S": "-1"},
        {"SKINFLINT_DERIVED_MARGIN": "-0.5"},
        {"SKINFLINT_DERIVED_MARGIN": "nan"},
    ],
)
def test_bad_settings_are_one_line_errors(env: dict[str, str]) -> None:
    with pytest.raises(ControlError, match="bad planner setting"):
        ControlConfig.from_env(env)


def test_the_derived_margin_is_a_setting_the_first_plan_uses() -> None:
    # 0.5 by default (1 / 0.66, the roofline leave-one-out's worst CUDA-graph ratio); 0 plans derived
    # entries at face value
    assert ControlConfig.from_env({}).derived_margin == 0.5
    assert ControlConfig.from_env({"SKINFLINT_DERIVED_MARGIN": "0"}).derived_margin == 0.0
