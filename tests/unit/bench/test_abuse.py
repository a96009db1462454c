"""``skinflint bench abuse``'s pieces that need no stack: the bombs it sends and its option checks (the
run itself starts a local stack: it is a benchmark, run by hand, its page under docs/results/)."""

from __future__ import annotations

import argparse
import io
import struct

import pytest
from PIL import Image

from bench.abuse import RSS_FACTOR, Case, add_arguments, png_bomb, run_command
from bench.errors import OptionError


def test_a_png_bomb_claims_its_size_in_a_few_bytes():
    bomb = png_bomb(20_000, 20_000, rows=200)
    assert bomb.startswith(b"\x89PNG\r\n\x1a\n")
    # IHDR: width and height as the header says, 8-bit greyscale
    assert struct.unpack(">II", bomb[16:24]) == (20_000, 20_000)
    assert len(bomb) < 64 * 1024
    # PIL's own guard refuses it from the header alone (which is what makes it a bomb)
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(bomb))


def test_a_case_is_one_json_row():
    case = Case("x", "413 image_too_large", "413 image_too_large", True, "front RSS 70 MB")
    assert case.as_json() == {
        "case": "x", "expected": "413 image_too_large", "got": "413 image_too_large", "ok": True,
        "detail": "front RSS 70 MB",
    }  # fmt: skip
    assert RSS_FACTOR == 2.0  # issue #28: front memory under any single request <= 2x its idle RSS


@pytest.mark.parametrize(
    "flag", [["--rate", "0"], ["--polls", "0"], ["--flood-s", "-1"], ["--flood-runs", "0"]]
)
def test_bad_options_are_one_line(flag):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([*flag, "--no-results"])
    with pytest.raises(OptionError):
        run_command(args)


def test_every_frame_accepted_during_the_floods_is_answered_dropped_or_counted_lost():
    from typing import Any

    from bench.abuse import _accounted

    answers = {
        "a": [{"status": "done", "tasks": []}],
        "b": [
            {"status": "queued"},
            {"status": "dropped", "tasks": [{"status": "dropped", "reason": "deadline"}]},
        ],
        "c": [{"status": "dropped", "tasks": [{"status": "dropped", "reason": "stranded"}]}],
        "d": [],  # unknown: 404
    }

    class Answer:
        def __init__(self, doc: dict[str, Any] | None) -> None:
            self.status_code = 200 if doc is not None else 404
            self._doc = doc

        def json(self) -> dict[str, Any]:
            assert self._doc is not None
            return self._doc

    class Client:
        def get(self, url: str, **_: Any) -> Answer:
            left = answers[url.rsplit("/", 1)[-1]]
            return Answer(left.pop(0) if left else None)

    class Run:
        client, url, key, cases = Client(), "http://front", "k", []

    run = Run()
    _accounted(run, ["a", "b", "c", "d"], runs=5, versions=3, wait_s=5.0)  # type: ignore[arg-type]
    (case,) = run.cases
    assert case.got == "1 answered, 2 dropped (deadline x1, stranded x1), 1 lost" and not case.ok
    assert "4 frames accepted during 5 flood run(s) (3 plan versions published)" in case.name
