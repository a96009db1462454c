"""docs/deploy.md quotes the DynamoDB units per second of ``skinflint plan traffic --rate 50000 --json``
(``table_units_per_s``): one source of truth, the command."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from cdk import constants as C

pytestmark = pytest.mark.infra


def _plan(rate: float) -> dict[str, Any]:
    from skinflint.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "traffic", "--rate", str(rate), "--json"]) == 0
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


def test_the_guide_quotes_the_tables_units_of_this_plan() -> None:
    units = _plan(50_000)["table_units_per_s"]
    doc = " ".join((C.REPO_ROOT / "docs" / "deploy.md").read_text().split())
    res, cfg, per = units["results"], units["config"], units["per_frame"]
    assert f"results table needs {res['read']:,} read and {res['write']:,} write request units" in doc
    assert f"({per['results_read']:g} and {per['results_write']:g} per frame:" in doc
    assert f"config table {cfg['read']:,} read and {cfg['write']:,} write units per second" in doc
    assert f"({units['front_instances']:,} front executions" in doc
    assert f"{units['instances']} instance agents" in doc
    hint = units["hottest_key_units_per_s"]["plan#current#h<i> reads"]
    assert f"({hint} reads per second each at {units['front_instances']:,} executions" in doc
    assert f"the agents' {units['hottest_key_units_per_s']['plan#current reads']} reads per second" in doc
    assert units["over_table_defaults"] == []  # at 10 frames per POST (the clients' default)
    assert "Both results figures are within DynamoDB's default of 40,000" in doc
    assert f"results table's {res['write']:,} writes per second" in doc
