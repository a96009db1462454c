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


@pytest.mark.parametrize("flag", [["--rate", "0"], ["--polls", "0"], ["--flood-s", "-1"]])
def test_bad_options_are_one_line(flag):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([*flag, "--no-results"])
    with pytest.raises(OptionError):
        run_command(args)
