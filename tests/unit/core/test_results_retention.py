"""The results' retention setting: parsed with a one-line error, passed on to the workers' environment,
and the same attribute and figure as the CDK stacks' TTL and S3 lifecycle."""

from __future__ import annotations

import pytest

from cdk import constants as C
from core.adapters.results import EXPIRES_AT, ResultStore, expires_at
from core.settings import DEFAULT_RESULTS_RETENTION_DAYS, DataPlaneConfig, results_retention_from_env


def test_the_default_retention_is_a_week_and_a_setting_overrides_it():
    assert results_retention_from_env({}) == DEFAULT_RESULTS_RETENTION_DAYS == 7.0
    assert results_retention_from_env({"SKINFLINT_RESULTS_RETENTION_DAYS": " "}) == 7.0
    assert results_retention_from_env({"SKINFLINT_RESULTS_RETENTION_DAYS": "0.5"}) == 0.5
    cfg = DataPlaneConfig.from_env({"SKINFLINT_RESULTS_RETENTION_DAYS": "2"})
    assert cfg.results_retention_s == 2 * 86_400
    assert DataPlaneConfig.from_env(cfg.to_env()).results_retention_days == 2.0  # workers get it


@pytest.mark.parametrize("raw", ["0", "-1", "366", "nan", "inf", "a week"])
def test_a_bad_retention_is_one_line_naming_the_setting(raw):
    with pytest.raises(ValueError, match="SKINFLINT_RESULTS_RETENTION_DAYS") as err:
        DataPlaneConfig.from_env({"SKINFLINT_RESULTS_RETENTION_DAYS": raw})
    assert "\n" not in str(err.value)


def test_a_store_refuses_a_retention_that_keeps_nothing():
    with pytest.raises(ValueError, match="retention_s"):
        ResultStore(object(), "t", retention_s=0.0)


def test_expiry_is_whole_seconds_rounded_up():
    assert expires_at(100.0, 60.0) == 160
    assert expires_at(100.2, 60.0) == 161


def test_the_data_plane_and_the_stacks_agree_on_the_attribute_and_the_figure():
    assert EXPIRES_AT == C.RESULTS_TTL_ATTRIBUTE
    assert C.RESULTS_RETENTION_DAYS == DEFAULT_RESULTS_RETENTION_DAYS
    assert C.OUTPUTS_EXPIRE_DAYS == C.RESULTS_RETENTION_DAYS  # task items point at the outputs


def test_a_front_with_a_bad_retention_answers_503_with_the_reason_in_its_log(monkeypatch, caplog):
    from fastapi.testclient import TestClient

    from front.app import create_app
    from front.wiring import service_from_config

    monkeypatch.setenv("SKINFLINT_RESULTS_RETENTION_DAYS", "forever")
    client = TestClient(create_app(lambda: service_from_config(background_metrics=False)))
    r = client.get("/v1/requests/0123456789abcdef0123456789abcdef", headers={"x-api-key": "k"})
    assert (r.status_code, r.json()["error"]) == (503, "unavailable")
    assert "SKINFLINT_RESULTS_RETENTION_DAYS must be a number of days" in caplog.text
