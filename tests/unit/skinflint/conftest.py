"""The CLI tests run against the deployment's settings at their defaults, with fake credentials and no
endpoint: nothing of the developer's environment reaches the commands (and what they set is undone
after each test)."""

from __future__ import annotations

import pytest

#: The settings a command reads that a developer's shell may have set.
DEPLOYMENT_SETTINGS = (
    "AWS_REGION",
    "SKINFLINT_ENDPOINT_URL",
    "SKINFLINT_BUCKET",
    "SKINFLINT_CONFIG_TABLE",
    "SKINFLINT_RESULTS_TABLE",
    "SKINFLINT_METRICS_NAMESPACE",
)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in DEPLOYMENT_SETTINGS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
