"""cdk/limits.py table_units: the DynamoDB units per second a peak needs (pure arithmetic), and the
polling periods it assumes are the code's."""

from __future__ import annotations

import dataclasses

from cdk import limits
from cdk.limits import table_units

UNITS = {"dynamodb_read_units": 10.76, "dynamodb_write_units": 7.5}  # the traffic app's (profiles/allin.py)


def test_units_at_fifty_thousand_frames_per_second() -> None:
    out = table_units(50_000, UNITS, {"c6i.large": 98, "t4": 55}, front_instances=7_500, roots=1)
    # results: 50,000 x 10.76 = 538,000 read; 50,000 x 7.5 = 375,000 write
    assert out["results"] == {"read": 538_000, "write": 375_000}
    # config reads: 7,500 fronts x (1 hint/s + 1 key read per 10 s) = 8,250, + 153 agents x 1/s = 8,403;
    # writes: 153 heartbeats per 5 s = 30.6 -> 31
    assert out["config"] == {"read": 8_403, "write": 31}
    # the busiest hint: 7,500 / 16 = 468.75 -> 469 reads/s, under a partition's 3,000
    assert out["hottest_key_units_per_s"] == {"plan#current#h<i> reads": 469, "plan#current reads": 153}
    assert out["over_table_defaults"] == ["results read", "results write"]


def test_a_small_peak_fits_the_defaults() -> None:
    # 1,000 frames/s: 10,760 read, 7,500 write; 150 fronts: 150 + 15 + 4 agents = 169 config reads
    out = table_units(1_000, UNITS, {"t4": 2, "c6i.large": 2}, front_instances=150, roots=1)
    assert out["results"] == {"read": 10_760, "write": 7_500}
    assert out["config"]["read"] == 169
    assert out["over_table_defaults"] == []


def test_the_polling_periods_are_the_codes() -> None:
    from core.adapters.plan_store import HINTS
    from front import service
    from workers.agent import InstanceAgent

    fields = {f.name: f.default for f in dataclasses.fields(InstanceAgent)}
    assert limits.FRONT_POINTER_CHECK_S == service._POINTER_TTL_S
    assert limits.FRONT_KEY_TTL_S == service._KEY_TTL_S
    assert limits.AGENT_POLL_S == fields["poll_s"]
    assert limits.AGENT_REPORT_S == fields["report_s"]
    assert limits.POINTER_HINTS == HINTS
