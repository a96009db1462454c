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


# -- PNG checked while inflating, without an image buffer ----------------------------------------------


def _pngs() -> list[bytes]:
    import random

    rng = random.Random(1)
    out = []
    for mode in ("1", "L", "LA", "P", "RGB", "RGBA", "I;16"):
        for size in ((1, 1), (7, 3), (33, 17)):
            im = Image.new("RGB", size)
            im.putdata(
                [
                    (rng.randrange(256), rng.randrange(256), rng.randrange(256))
                    for _ in range(size[0] * size[1])
                ]
            )
            im = im.convert("I").convert("I;16") if mode == "I;16" else im.convert(mode)
            for kw in ({}, {"optimize": True}, {"compress_level": 0}):
                buf = io.BytesIO()
                im.save(buf, format="PNG", **kw)
                out.append(buf.getvalue())
    return out


def test_every_valid_png_is_checked_without_pillow(monkeypatch):
    from front.images import _png_streamed

    pngs = _pngs()
    assert all(_png_streamed(p) for p in pngs)
    monkeypatch.setattr(Image, "open", lambda *_a, **_k: (_ for _ in ()).throw(AssertionError("decoded")))
    for p in pngs:
        check_image(p, "image/png")


def test_a_png_the_stream_check_takes_is_one_pillow_decodes():
    # GIVEN 5,000 mutations of valid PNGs (truncated, bytes overwritten, bytes inserted)
    import random

    from front.images import _png_streamed

    rng = random.Random(7)
    pngs = _pngs()
    taken = 0
    for _ in range(5_000):
        d = bytearray(rng.choice(pngs))
        op = rng.random()
        if op < 0.3:
            d = d[: rng.randrange(8, len(d))]
        elif op < 0.8:
            for _ in range(rng.randrange(1, 4)):
                d[rng.randrange(8, len(d))] = rng.randrange(256)
        else:
            at = rng.randrange(8, len(d))
            d[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20)))
        # THEN whatever the stream check takes, Pillow decodes (what it does not take, Pillow judges)
        if _png_streamed(bytes(d)):
            taken += 1
            with Image.open(io.BytesIO(bytes(d)), formats=["PNG"]) as im:
                im.load()
    assert taken > 20  # the check did take some mutated files (pixel bytes changed, CRC-free data)


def test_a_16_megapixel_png_is_checked_in_a_few_megabytes():
    import tracemalloc

    big = Image.new("RGB", (4096, 4096), (1, 2, 3))
    buf = io.BytesIO()
    big.save(buf, format="PNG")
    data = buf.getvalue()
    del big
    tracemalloc.start()
    check_image(data, "image/png")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * 2**20  # the decoded image would be 4096 x 4096 x 3 = 48 MiB
