"""``skinflint bench tco``: every design's all-in $ per million frames, itemised, with the targets of
issue #25; a PNG and a dated page; bad options are one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skinflint.cli import main


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["bench", "tco", "--apps", "traffic", "--rates", "200", *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_a_tiny_tco_run_prices_every_design(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "--frame-kb", "8,60")
    rows = doc["rows"]
    assert [(r["app"], r["rate"], r["frame_kb"]) for r in rows] == [("traffic", 200, 8), ("traffic", 200, 60)]
    for row in rows:
        for design in (
            "today", "today_batch", "today_push", "today_rest_waf", "per_task", "triton_alb", "sagemaker"
        ):  # fmt: skip
            d = row[design]
            # each design's items add up to its total (rounded to 4 places each)
            assert sum(d["items"].values()) == pytest.approx(d["per_million_frames"], abs=5e-3), design
        # ten frames per POST: a tenth of the front's requests and POST items
        assert row["today_batch"]["per_million_frames"] < row["today"]["per_million_frames"] / 2
        assert row["today_batch"]["per_million_frames"] < row["per_task"]["per_million_frames"]
        assert row["triton_alb"]["low_per_million_frames"] <= row["triton_alb"]["per_million_frames"]
    # the REST API + WAF option: 3.50 + 0.60 per million POSTs of 10 frames, against the HTTP API's 1.00
    rest, http = rows[0]["today_rest_waf"]["items"], rows[0]["today_batch"]["items"]
    assert (rest["api_gateway"], rest["waf"], http["api_gateway"]) == pytest.approx((0.35, 0.06, 0.10))
    # a larger frame costs more in every design that carries it
    assert rows[1]["today"]["per_million_frames"] > rows[0]["today"]["per_million_frames"]
    assert [t["design"] for t in doc["targets"]] == ["today_batch", "today_push"]
    assert doc["plots"] and Path(doc["plots"][0]).is_file()  # the PNG, under docs/results/ of the test dir
    assert Path(doc["plots"][0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "tco", "--apps", "face", "--rates", "100", "--frame-kb", "8", "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "all-in $ per million frames" in out and "itemised" in out
    pages = list((tmp_path / "docs" / "results").glob("*-tco.md"))
    assert len(pages) == 1 and "skinflint bench tco" in pages[0].read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--apps", "nope"], "--apps: unknown app(s) nope"),
        (["--rates", "0"], "--rates must list numbers > 0"),
        (["--frame-kb", "x"], "--frame-kb must be comma-separated numbers"),
        (["--frames-per-post", "11"], "--frames-per-post must be 1 to 10"),
    ],
)
def test_bad_options_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["bench", "tco", *argv, "--no-results"]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
