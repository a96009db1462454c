"""Embedded Metric Format flushes (the Lambda front's metrics): every document keeps to the format
and its limits, and what CloudWatch would extract from the lines is exactly what was put."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.adapters.metrics import (
    EMF_MAX_METRICS,
    LOG_EVENT_OVERHEAD_BYTES,
    EmfMetrics,
)
from core.errors import MetricsError

T0 = 1_800_000_000.0  # a whole second: bucket starts below are exact

_Series = tuple[str, str, str, tuple[tuple[str, str], ...], int]  # namespace, name, unit, dims, ms


def _check_document(doc: dict[str, Any]) -> None:
    """The parts of the EMF specification these documents use."""
    meta = doc["_aws"]
    assert isinstance(meta["Timestamp"], int)
    names: list[str] = []
    for directive in meta["CloudWatchMetrics"]:
        assert isinstance(directive["Namespace"], str) and directive["Namespace"]
        names += [m["Name"] for m in directive["Metrics"]]
        for keys in directive["Dimensions"]:
            assert len(keys) <= 30
            for k in keys:
                assert isinstance(doc[k], str)  # every dimension key is a root member with a string value
    assert 1 <= len(names) <= EMF_MAX_METRICS and len(set(names)) == len(names)
    for name in names:
        value = doc[name]
        if isinstance(value, dict):
            assert len(value["Values"]) == len(value["Counts"]) <= 100
            assert sum(value["Counts"]) == value["Count"]
            assert min(value["Values"]) == value["Min"] and max(value["Values"]) == value["Max"]
            got = sum(v * c for v, c in zip(value["Values"], value["Counts"], strict=True))
            assert math.isclose(got, value["Sum"], rel_tol=1e-9, abs_tol=1e-9)
        else:
            assert isinstance(value, float)


def extract(lines: list[str]) -> dict[_Series, list[float]]:
    """What CloudWatch Logs would extract: per series, [count, sum, min, max]."""
    out: dict[_Series, list[float]] = {}
    for line in lines:
        assert "\n" not in line
        doc = json.loads(line)
        _check_document(doc)
        meta = doc["_aws"]
        for directive in meta["CloudWatchMetrics"]:
            for keys in directive["Dimensions"]:
                dims = tuple((k, doc[k]) for k in keys)
                for m in directive["Metrics"]:
                    v = doc[m["Name"]]
                    c, s, lo, hi = (
                        (v["Count"], v["Sum"], v["Min"], v["Max"]) if isinstance(v, dict) else (1, v, v, v)
                    )
                    key = (directive["Namespace"], m["Name"], m["Unit"], dims, meta["Timestamp"])
                    agg = out.setdefault(key, [0, 0.0, math.inf, -math.inf])
                    agg[0] += c
                    agg[1] += s
                    agg[2] = min(agg[2], lo)
                    agg[3] = max(agg[3], hi)
    return out


def test_a_flush_writes_a_line_per_bucket_and_set_of_agreeing_series() -> None:
    lines: list[str] = []
    m = EmfMetrics("Skinflint", write=lines.append, resolution_s=1.0)
    for v in (3, 1, 7, 2):
        m.put("FramesAccepted", v, App="traffic", at=T0 + 0.2)
    m.put("DispatchMs", 4.5, "Milliseconds", App="traffic", at=T0 + 0.7)
    m.put("FramesAccepted", 5, App="faces", at=T0 + 0.1)
    m.put("FramesToS3", 1, at=T0 + 1.5)
    m.flush()
    docs = [json.loads(x) for x in lines]
    assert len(docs) == 3  # traffic's two series; faces (another App, FramesAccepted again); the next bucket
    traffic = next(d for d in docs if d.get("App") == "traffic")
    assert traffic["_aws"]["Timestamp"] == int(T0 * 1000)
    assert traffic["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["App"]]
    assert traffic["FramesAccepted"] == {
        "Values": [1.0, 7.0, 2.5],
        "Counts": [1, 1, 2],
        "Count": 4,
        "Sum": 13.0,
        "Min": 1.0,
        "Max": 7.0,
    }
    assert traffic["DispatchMs"] == 4.5  # one value: a plain number
    alone = next(d for d in docs if "FramesToS3" in d)
    assert alone["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]  # no dimension: an empty set
    assert alone["_aws"]["Timestamp"] == int((T0 + 1) * 1000)
    ex = extract(lines)
    assert ex[("Skinflint", "FramesAccepted", "Count", (("App", "traffic"),), int(T0 * 1000))] == [
        4,
        13,
        1,
        7,
    ]
    m.flush()  # nothing left: nothing written
    assert len(lines) == 3


def test_equal_values_make_one_bin_and_two_values_are_kept_as_they_are() -> None:
    lines: list[str] = []
    m = EmfMetrics("NS", write=lines.append)
    for _ in range(5):
        m.put("FrontRejected", 1, Reason="shed", at=T0)
    m.put("AdmissionMs", 0.5, "Milliseconds", Reason="shed", at=T0)
    m.put("AdmissionMs", 2.0, "Milliseconds", Reason="shed", at=T0)
    m.flush()
    (doc,) = (json.loads(x) for x in lines)
    assert doc["FrontRejected"]["Values"] == [1.0] and doc["FrontRejected"]["Counts"] == [5]
    assert doc["AdmissionMs"]["Values"] == [0.5, 2.0] and doc["AdmissionMs"]["Counts"] == [1, 1]


def test_documents_hold_at_most_the_limit_of_metrics_and_each_name_once() -> None:
    lines: list[str] = []
    m = EmfMetrics("NS", write=lines.append)
    for i in range(2 * EMF_MAX_METRICS + 50):
        m.put(f"M{i}", i, App="a", at=T0)
    m.put("M0", 9, "Milliseconds", App="a", at=T0)  # the same name in another unit: not beside M0
    m.flush()
    docs = [json.loads(x) for x in lines]
    assert [len(d["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for d in docs] == [100, 100, 51]
    assert sorted(d["M0"] for d in docs if "M0" in d) == [0.0, 9.0]
    ex = extract(lines)
    assert len(ex) == 2 * EMF_MAX_METRICS + 51
    assert ex[("NS", "M0", "Milliseconds", (("App", "a"),), int(T0 * 1000))] == [1, 9, 9, 9]


def test_series_cloudwatch_would_refuse_are_reported_and_the_rest_still_written() -> None:
    lines: list[str] = []
    m = EmfMetrics("NS", write=lines.append)
    m.put("Good", 1, at=T0)
    m.put("Bad", math.nan, at=T0)
    m.put("EmptyApp", 1, App="", at=T0)
    m.put("LongApp", 1, App="x" * 1025, at=T0)
    with pytest.raises(MetricsError, match="refuse were left out: Bad, EmptyApp, LongApp"):
        m.flush()
    assert list(extract(lines)) == [("NS", "Good", "Count", (), int(T0 * 1000))]


def test_a_metric_named_like_its_own_dimension_is_refused() -> None:
    m = EmfMetrics("NS", write=lambda _: None)
    m.put("App", 1, App="a", at=T0)
    with pytest.raises(MetricsError, match="also a dimension"):
        m.flush()


def test_series_with_other_dimensions_share_a_line_when_they_agree() -> None:
    """A Lambda invocation's series: one line per value of a shared key (Operation, Unit, App), not
    one per series; a metric name used as a dimension elsewhere stays apart."""
    lines: list[str] = []
    m = EmfMetrics("NS", write=lines.append)
    m.put("FramesAccepted", 2, App="a", at=T0)
    m.put("FrontRejected", 1, App="a", Reason="shed", at=T0)
    m.put("AwsRequests", 1, Component="front", Service="sqs", Operation="SendMessageBatch", at=T0)
    m.put("AwsRequests", 1, Component="front", Service="lambda", Operation="Invocation", at=T0)
    m.put("AwsRequestUnits", 3, Component="front", Service="sqs", Unit="Requests", at=T0)
    m.put("Reason", 1, Kind="x", at=T0)  # a metric named like another series' dimension
    m.flush()
    docs = [json.loads(x) for x in lines]
    assert len(docs) == 2  # two values of Service (and of Operation): two lines
    assert len(docs[0]["_aws"]["CloudWatchMetrics"]) == 3  # App; App, Reason; Component, Operation, Service
    reason_metric = next(d for d in docs if "Kind" in d)
    assert reason_metric["Reason"] == 1.0  # not in the line where Reason is a dimension
    ex = extract(lines)
    assert len(ex) == 6
    assert ex[("NS", "FrontRejected", "Count", (("App", "a"), ("Reason", "shed")), int(T0 * 1000))][0] == 1


def test_written_bytes_are_reported_and_collectors_join_the_flush() -> None:
    lines: list[str] = []
    told: list[int] = []
    m = EmfMetrics("NS", write=lines.append, on_written=told.append)
    m.add_collector(lambda metrics: metrics.put("AwsRequests", 2, Service="sqs", at=T0))
    m.put("FramesAccepted", 1, App="a", at=T0)
    m.flush()
    assert told == [sum(len(x.encode()) + LOG_EVENT_OVERHEAD_BYTES for x in lines)]
    assert {k[1] for k in extract(lines)} == {"FramesAccepted", "AwsRequests"}


def test_collectors_run_at_most_every_collect_interval_and_at_close() -> None:
    lines: list[str] = []
    m = EmfMetrics("NS", write=lines.append, collect_every_s=3600)
    runs: list[int] = []
    m.add_collector(lambda metrics: (runs.append(1), metrics.put("AwsRequests", 1, at=T0)))
    for _ in range(3):
        m.put("FramesAccepted", 1, App="a", at=T0)
        m.flush()
    assert len(runs) == 1  # the first flush, then not for an hour
    m.close()
    assert len(runs) == 2
    assert extract(lines)[("NS", "AwsRequests", "Count", (), int(T0 * 1000))][0] == 2


def test_a_write_that_fails_is_a_metrics_error_and_the_other_lines_are_written() -> None:
    lines: list[str] = []

    def write(line: str) -> None:
        if '"Bad"' in line:
            raise OSError(28, "No space left on device")
        lines.append(line)

    m = EmfMetrics("NS", write=write)
    m.put("Good", 1, App="a", at=T0)
    m.put("Bad", 1, App="b", at=T0)  # another App value: a line of its own
    with pytest.raises(MetricsError, match="could not be written.*No space left"):
        m.flush()
    assert [json.loads(x).get("Good") for x in lines] == [1.0]


def test_the_default_writer_prints_one_line_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    m = EmfMetrics("NS")
    m.put("FramesAccepted", 2, App="a", at=T0)
    m.flush()
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out)["FramesAccepted"] == 2.0


_puts = st.lists(
    st.tuples(
        st.sampled_from(["FramesAccepted", "DispatchMs", "FrontRejected"]),
        st.sampled_from(["Count", "Milliseconds"]),
        st.dictionaries(st.sampled_from(["App", "Reason"]), st.sampled_from(["a", "b"]), max_size=2),
        st.floats(0, 3.0),  # seconds after T0: three buckets
        st.floats(-1e6, 1e6, allow_nan=False),
    ),
    max_size=300,
)


@settings(max_examples=60, deadline=None)
@given(_puts)
def test_what_cloudwatch_extracts_is_what_was_put(
    puts: list[tuple[str, str, dict[str, str], float, float]],
) -> None:
    lines: list[str] = []
    m = EmfMetrics("NS", write=lines.append, resolution_s=1.0)
    expected: dict[_Series, list[float]] = defaultdict(lambda: [0, 0.0, math.inf, -math.inf])
    for name, unit, dims, dt, value in puts:
        m.put(name, value, unit, at=T0 + dt, **dims)
        key = ("NS", name, unit, tuple(sorted(dims.items())), int(math.floor(T0 + dt) * 1000))
        e = expected[key]
        e[0] += 1
        e[1] += value
        e[2] = min(e[2], value)
        e[3] = max(e[3], value)
    m.flush()
    got = extract(lines)
    assert got.keys() == expected.keys()
    for key, (c, s, lo, hi) in expected.items():
        gc, gs, glo, ghi = got[key]
        assert (gc, glo, ghi) == (c, lo, hi)
        assert math.isclose(gs, s, rel_tol=1e-9, abs_tol=1e-6)
