"""The local stack's stand-in for CloudWatch's EMF extraction: whole lines only, every series as a
statistic set, bad lines counted and skipped, nothing lost when a PutMetricData fails."""

from __future__ import annotations

import json
from typing import Any

from core.adapters.metrics import EmfMetrics, emf_file_writer
from skinflint.local.emf import EmfExtractor, metric_data

T0 = 1_800_000_000.0


class FakeCloudWatch:
    def __init__(self, fail: int = 0) -> None:
        self.data: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    def put_metric_data(self, Namespace: str, MetricData: list[dict[str, Any]]) -> None:  # noqa: N803
        if self.fail:
            self.fail -= 1
            raise ConnectionError("moto is busy")
        self.data += [(Namespace, d) for d in MetricData]


def test_metric_data_reads_numbers_arrays_and_value_sets() -> None:
    doc = {
        "_aws": {
            "Timestamp": int(T0 * 1000),
            "CloudWatchMetrics": [
                {"Namespace": "A", "Dimensions": [["App"], []], "Metrics": [{"Name": "N"}, {"Name": "L"}]},
                {
                    "Namespace": "B",
                    "Dimensions": [["App"]],
                    "Metrics": [{"Name": "S", "Unit": "Milliseconds"}],
                },
            ],
        },
        "App": "x",
        "N": 2,
        "L": [1, 5, 3],
        "S": {"Values": [1.0, 4.0], "Counts": [1, 3], "Count": 4, "Sum": 13.0, "Min": 1.0, "Max": 4.0},
    }
    out = metric_data(doc)
    assert sorted(out) == ["A", "B"] and len(out["A"]) == 4  # two metrics under two dimension sets
    by = {(d["MetricName"], len(d["Dimensions"])): d for d in out["A"]}
    assert by[("L", 1)]["StatisticValues"] == {"SampleCount": 3, "Sum": 9, "Minimum": 1, "Maximum": 5}
    assert by[("N", 0)]["Dimensions"] == [] and by[("N", 0)]["Unit"] == "None"
    (s,) = out["B"]
    assert s["StatisticValues"] == {"SampleCount": 4, "Sum": 13.0, "Minimum": 1.0, "Maximum": 4.0}
    assert s["Timestamp"] == T0 and s["Dimensions"] == [{"Name": "App", "Value": "x"}]


def test_the_extractor_reads_whole_lines_skips_bad_ones_and_keeps_what_failed(tmp_path) -> None:
    path = tmp_path / "front.emf.jsonl"
    m = EmfMetrics("Skinflint", write=emf_file_writer(str(path)))
    cw = FakeCloudWatch(fail=1)
    ex = EmfExtractor(str(path), cw)
    assert ex.extract() == 0  # no file yet
    m.put("FramesAccepted", 3, App="a", at=T0)
    m.flush()
    with open(path, "a") as f:
        f.write("not json\n")
        f.write('{"_aws": {"Timestamp": 1}, "half": ')  # a line still being written
    try:
        ex.extract()
    except ConnectionError:
        pass
    assert ex.lines == 2 and ex.invalid == 1 and cw.data == []  # failed put: kept pending
    assert ex.extract() == 0  # nothing new; the pending series go in now
    assert [(ns, d["MetricName"], d["StatisticValues"]["Sum"]) for ns, d in cw.data] == [
        ("Skinflint", "FramesAccepted", 3.0)
    ]
    with open(path, "a") as f:
        f.write('"x"}\n')  # the half line completed: valid JSON, not valid EMF
    m.put("FramesAccepted", 2, App="a", at=T0 + 1)
    m.flush()
    ex.stop()
    assert ex.lines == 4 and ex.invalid == 2
    assert sum(d["StatisticValues"]["Sum"] for _, d in cw.data) == 5.0


def test_a_started_extractor_puts_lines_as_they_come(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    m = EmfMetrics("NS", write=emf_file_writer(str(path)))
    cw = FakeCloudWatch()
    ex = EmfExtractor(str(path), cw, poll_s=0.01).start()
    for i in range(20):
        m.put("FramesAccepted", 1, App="a", at=T0 + i)
        m.flush()
    ex.stop()
    assert len(cw.data) == 20 and ex.invalid == 0
    assert json.loads(path.read_text().splitlines()[0])["FramesAccepted"] == 1.0


def test_the_extractor_follows_every_file_of_its_pattern_even_new_ones(tmp_path) -> None:
    cw = FakeCloudWatch()
    ex = EmfExtractor(str(tmp_path / "*.emf.jsonl"), cw)
    front = EmfMetrics("NS", write=emf_file_writer(str(tmp_path / "front.emf.jsonl")))
    front.put("FramesAccepted", 4, App="a", at=T0)
    front.flush()
    assert ex.extract() == 1
    agent = EmfMetrics("NS", write=emf_file_writer(str(tmp_path / "instance-i-1.emf.jsonl")))
    agent.put("BatchMs", 12.5, "Milliseconds", Module="detector", at=T0)
    agent.flush()
    front.put("FramesAccepted", 1, App="a", at=T0 + 1)
    front.flush()
    (tmp_path / "other.log").write_text("not matched\n")
    assert ex.extract() == 2 and ex.invalid == 0
    assert sorted(d["MetricName"] for _, d in cw.data) == ["BatchMs", "FramesAccepted", "FramesAccepted"]


def test_the_metrics_sink_setting_is_checked_and_carried() -> None:
    import pytest

    from core.clients import make_metrics
    from core.settings import DataPlaneConfig

    with pytest.raises(ValueError, match="SKINFLINT_METRICS_SINK must be one of cloudwatch, emf, got 'logs'"):
        DataPlaneConfig.from_env({"SKINFLINT_METRICS_SINK": "logs"})
    cfg = DataPlaneConfig.from_env({"SKINFLINT_METRICS_SINK": "emf", "SKINFLINT_EMF_FILE": "/tmp/x.jsonl"})
    assert DataPlaneConfig.from_env(cfg.to_env()) == cfg
    assert isinstance(make_metrics(DataPlaneConfig(metrics_sink="emf"), "worker"), EmfMetrics)
