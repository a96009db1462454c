"""A load test's figures from its per-frame outcomes (``loadtest/users.py`` writes one JSON line per
frame, each with the answer to the POST that carried it) and locust's CSV stats. Pure: no locust,
no I/O but reading the files it is given.

Definitions (docs/loadtest.md):
- *offered*: frames posted; *posts*: the POSTs that carried them (a frame's ``post_index`` 0 starts
  one; a line without it is a POST of its own), a POST split on 503 ``batch_too_large`` counted as
  the POSTs that were answered; *accepted*: frames answered 202; *shed*: frames answered 429/503
  with a shedding reason (every frame of a shed POST); *errors*: any other answer (including
  connection failures, status 0);
- *answered*: accepted frames whose result is ``done``; *dropped*: dropped early by a worker
  (reported, with the reason); *lost*: accepted and never finished by the end of the drain;
- *SLO attainment*: answered frames finished by their deadline, over accepted frames (dropped and
  lost count as misses) -- the issue's target -- and over answered frames (as ``skinflint demo``);
- RPS: frames posted per second of the run (``duration``), not counting result polls; the POST
  latency percentiles are per POST (each POST once, whatever its frames).
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


def _ms(xs: list[float], percent: float) -> float | None:
    value = percentile(xs, percent)
    return None if math.isnan(value) else value


def _summary(recs: list[dict[str, Any]], duration_s: float) -> dict[str, Any]:
    offered = len(recs)
    accepted = [record for record in recs if record.get("status") == 202]
    shed = [record for record in recs if record.get("status") in SHED_STATUSES]
    errors = [record for record in recs if record.get("status") not in (202, *SHED_STATUSES)]
    done = [record for record in accepted if record.get("result") == "done"]
    dropped = [record for record in accepted if record.get("result") == "dropped"]
    lost = [record for record in accepted if record.get("result") not in ("done", "dropped")]
    lat = [float(record["latency_s"]) for record in done if record.get("latency_s") is not None]
    within = sum(
        1
        for record in done
        if record.get("finished_at") is not None and record["finished_at"] <= record.get("deadline", math.inf)
    )
    posts = [record for record in recs if record.get("post_index", 0) == 0]
    post = [float(record["post_ms"]) for record in posts if record.get("post_ms") is not None]
    return {
        "offered": offered,
        "posts": len(posts),
        "frames_per_post": offered / len(posts) if posts else math.nan,
        "accepted": len(accepted),
        "shed": len(shed),
        "shed_by_reason": dict(
            Counter(f"{record['status']} {record.get('error') or '?'}" for record in shed)
        ),
        "errors": len(errors),
        "errors_by_kind": dict(
            Counter(f"{record.get('status')} {record.get('error') or ''}".strip() for record in errors)
        ),
        "answered": len(done),
        "dropped": len(dropped),
        "drop_reasons": dict(
            Counter(reason for record in dropped for reason in record.get("drop_reasons", ["?"]))
        ),
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
    agg = next((row for row in rows if row.get("Name") == "Aggregated"), None)
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
    apps = sorted({record.get("app", "?") for record in outcomes})
    return {
        "total": _summary(outcomes, duration_s),
        "apps": {
            app: _summary([record for record in outcomes if record.get("app") == app], duration_s)
            for app in apps
        },
        "locust": _locust_totals(stats_rows),
    }
