"""Input limits on a frame's image: magic bytes, header size, decoding cap (front/images.py)."""

from __future__ import annotations

import io
import struct
import time
import zlib

import pytest
from PIL import Image

from front.errors import RequestRejectedError
from front.images import ImageLimits, LimitsConfig, check_image, image_size, sniff


def encoded(fmt: str, size: tuple[int, int] = (32, 24), **kw) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buf, format=fmt, **kw)
    return buf.getvalue()


def png_bomb(width: int, height: int) -> bytes:
    """A valid PNG header of ``width`` x ``height`` greyscale pixels whose data is tiny zlib of
    zeros for the first rows only: a few hundred bytes on the wire that claim ``width*height``."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (width + 1) * 4, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def rejected(data: bytes, ctype: str, limits: ImageLimits | None = None) -> RequestRejectedError:
    with pytest.raises(RequestRejectedError) as err:
        check_image(data, ctype, limits)
    return err.value


@pytest.mark.parametrize(
    ("fmt", "kw", "name"),
    [("JPEG", {}, "JPEG"), ("PNG", {}, "PNG"), ("GIF", {}, "GIF"), ("TIFF", {}, "TIFF"), ("BMP", {}, "BMP")],
)
def test_the_format_comes_from_the_magic_bytes(fmt, kw, name):
    assert sniff(encoded(fmt, **kw)) == name


@pytest.mark.parametrize(
    ("fmt", "ctype"), [("TIFF", "image/jpeg"), ("GIF", "image/png"), ("PNG", "image/jpeg")]
)
def test_an_image_labelled_as_another_format_is_refused_before_decoding(fmt, ctype, monkeypatch):
    # GIVEN an Image.open that would fail the test if reached
    def boom(*_a, **_k):
        raise AssertionError("decoded")

    monkeypatch.setattr(Image, "open", boom)
    err = rejected(encoded(fmt), ctype)
    assert (err.status, err.error) == (422, "undecodable_image")
    assert ctype in err.reason and fmt in err.reason


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_the_size_is_read_from_the_header(fmt):
    kw = {"progressive": True} if fmt == "JPEG" else {}
    assert image_size(encoded(fmt, (640, 480), **kw), fmt) == (640, 480)


def test_a_jpeg_with_exif_and_icc_segments_before_its_frame_header_is_sized():
    data = encoded("JPEG", (300, 200), exif=b"Exif\x00\x00" + b"\x00" * 100, icc_profile=b"\x00" * 300)
    assert image_size(data, "JPEG") == (300, 200)


@pytest.mark.parametrize(
    ("size", "limits", "named"),
    [
        ((5000, 10), ImageLimits(), "4096x4096"),  # width over the default
        ((10, 5000), ImageLimits(), "4096x4096"),
        ((400, 300), ImageLimits(max_pixels=100_000), "100,000 pixels"),  # 400 x 300 = 120,000 > 100,000
        ((400, 300), ImageLimits(max_width=320), "320x4096"),
    ],
)
def test_an_image_over_the_limits_is_413_naming_the_limit_before_decoding(size, limits, named, monkeypatch):
    data = encoded("PNG", size)
    monkeypatch.setattr(Image, "open", lambda *_a, **_k: (_ for _ in ()).throw(AssertionError("decoded")))
    err = rejected(data, "image/png", limits)
    assert (err.status, err.error) == (413, "image_too_large")
    assert named in err.reason and f"{size[0]}x{size[1]}" in err.reason


def test_a_decompression_bomb_costs_nothing_and_is_a_413():
    bomb = png_bomb(30_000, 30_000)  # 900 MP claimed, a few hundred bytes sent
    assert len(bomb) < 2_000
    t0 = time.perf_counter()
    err = rejected(bomb, "image/png")
    assert (err.status, err.error) == (413, "image_too_large")
    assert time.perf_counter() - t0 < 0.05  # a header read, no decode
    assert "900,000,000 pixels" in err.reason


def test_an_image_within_the_limits_is_still_fully_decoded():
    ok = encoded("JPEG", (64, 48))
    check_image(ok, "image/jpeg")
    err = rejected(ok[: len(ok) // 2], "image/jpeg")  # truncated: the header is fine, the data is not
    assert (err.status, err.error) == (422, "undecodable_image")


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xd8\xff" + b"garbage" * 10,
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 30,
        encoded("PNG")[:40],
        b"not an image at all",
    ],
)
def test_undecodable_reasons_carry_no_object_repr(data):
    ctype = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
    err = rejected(data, ctype)
    assert err.error == "undecodable_image"
    assert " at 0x" not in err.reason and "<_io" not in err.reason


def test_limits_per_app_from_the_environment():
    cfg = LimitsConfig.from_env(
        {
            "SKINFLINT_FRONT_MAX_PIXELS": "2000000",
            "SKINFLINT_FRONT_IMAGE_LIMITS": '{"traffic": {"max_width": 1920, "max_height": 1080}}',
        }
    )
    assert cfg.for_app("other") == ImageLimits(max_pixels=2_000_000)
    assert cfg.for_app("traffic") == ImageLimits(1920, 1080, 2_000_000)
    with pytest.raises(ValueError, match="max_width"):
        LimitsConfig.from_env({"SKINFLINT_FRONT_IMAGE_LIMITS": '{"a": {"width": 3}}'})
    with pytest.raises(ValueError, match="positive"):
        LimitsConfig.from_env({"SKINFLINT_FRONT_MAX_WIDTH": "0"})
