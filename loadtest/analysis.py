"""A load test's figures from its per-frame outcomes (``loadtest/users.py`` writes one JSON line per
frame) and locust's CSV stats. Pure: no locust, no I/O but reading the files it is given.

Definitions (docs/loadtest.md):
- *offered*: frames posted; *accepted*: answered 202; *shed*: 429/503 with a shedding reason;
  *errors*: any other answer (including connection failures, status 0);
- *answered*: accepted frames whose result is ``done``; *dropped*: dropped early by a worker
  (reported, with the reason); *lost*: accepted and never finished by the end of the drain;
- *SLO attainment*: answered frames finished by their deadline, over accepted frames (dropped and
  lost count as misses) -- the issue's target -- and over answered frames (as ``skinflint demo``);
- RPS: frames posted per second of the run (``duration``), not counting result polls.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from skinflint.local.summary import percentile

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

__all__ = ["read_outcomes", "read_stats", "summarise_run"]

SHED_STATUSES = (429, 503)


def read_outcomes(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_stats(path: Path) -> list[dict[str, str]]:
    """Rows of locust's ``<prefix>_stats.csv`` (empty when the file is missing)."""
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _ms(xs: list[float], q: float) -> float | None:
    v = percentile(xs, q)
    return None if math.isnan(v) else v


def _summary(recs: list[dict[str, Any]], duration_s: float) -> dict[str, Any]:
    offered = len(recs)
    accepted = [r for r in recs if r.get("status") == 202]
    shed = [r for r in recs if r.get("status") in SHED_STATUSES]
    errors = [r for r in recs if r.get("status") not in (202, *SHED_STATUSES)]
    done = [r for r in accepted if r.get("result") == "done"]
    dropped = [r for r in accepted if r.get("result") == "dropped"]
    lost = [r for r in accepted if r.get("result") not in ("done", "dropped")]
    lat = [float(r["latency_s"]) for r in done if r.get("latency_s") is not None]
    within = sum(
        1
        for r in done
        if r.get("finished_at") is not None and r["finished_at"] <= r.get("deadline", math.inf)
    )
    post = [float(r["post_ms"]) for r in recs if r.get("post_ms") is not None]
    return {
        "offered": offered,
        "accepted": len(accepted),
        "shed": len(shed),
        "shed_by_reason": dict(Counter(f"{r['status']} {r.get('error') or '?'}" for r in shed)),
        "errors": len(errors),
        "errors_by_kind": dict(Counter(f"{r.get('status')} {r.get('error') or ''}".strip() for r in errors)),
        "answered": len(done),
        "dropped": len(dropped),
        "drop_reasons": dict(Counter(x for r in dropped for x in r.get("drop_reasons", ["?"]))),
        "lost": len(lost),
        "rps": offered / duration_s if duration_s > 0 else math.nan,
        "accepted_rps": len(accepted) / duration_s if duration_s > 0 else math.nan,
        "slo_attainment": within / len(accepted) if accepted else math.nan,
        "slo_attainment_answered": within / len(done) if done else math.nan,
        "latency_p50_s": _ms(lat, 50),
        "latency_p95_s": _ms(lat, 95),
        "latency_p99_s": _ms(lat, 99),
        "latency_max_s": max(lat) if lat else None,
        "post_p50_ms": _ms(post, 50),
        "post_p95_ms": _ms(post, 95),
        "post_p99_ms": _ms(post, 99),
    }


def _locust_totals(rows: Iterable[dict[str, str]]) -> dict[str, Any]:
    agg = next((r for r in rows if r.get("Name") == "Aggregated"), None)
    if agg is None:
        return {}

    def num(key: str) -> float | None:
        try:
            return float(agg[key])
        except (KeyError, TypeError, ValueError):
            return None

    return {
        "requests": num("Request Count"),
        "failures": num("Failure Count"),
        "rps": num("Requests/s"),
        "p50_ms": num("50%"),
        "p95_ms": num("95%"),
        "p99_ms": num("99%"),
    }


def summarise_run(
    outcomes: list[dict[str, Any]], stats_rows: list[dict[str, str]], duration_s: float
) -> dict[str, Any]:
    """Totals and per-app figures of one run, plus locust's own aggregated row (every request,
    result polls included)."""
    apps = sorted({r.get("app", "?") for r in outcomes})
    return {
        "total": _summary(outcomes, duration_s),
        "apps": {a: _summary([r for r in outcomes if r.get("app") == a], duration_s) for a in apps},
        "locust": _locust_totals(stats_rows),
    }
