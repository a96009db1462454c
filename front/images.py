"""Input limits on a frame's image, enforced before any work: the format from its magic bytes, its
width, height and pixel count from its header (no decoding), then a full decode under the same cap
(a truncated JPEG passes a header check). Every failure is a :class:`RequestRejectedError`
(413 ``image_too_large`` naming the limit, 422 ``undecodable_image``); never a 500.

The limits are per app: :class:`ImageLimits` for every app, overridden per app by
``SKINFLINT_FRONT_IMAGE_LIMITS`` (docs/dataplane.md, "Front API")."""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from io import BytesIO
from typing import TYPE_CHECKING, Any

from core.settings import DEFAULT_MAX_PIXELS
from front.errors import RequestRejectedError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["IMAGE_TYPES", "ImageLimits", "LimitsConfig", "check_image", "image_size", "sniff"]

IMAGE_TYPES = {"image/jpeg": "JPEG", "image/png": "PNG"}
_OBJECT_REPR = re.compile(r"<[^<>]*? at 0x[0-9a-fA-F]+>")  # <_io.BytesIO object at 0x7f...>


@dataclass(frozen=True)
class ImageLimits:
    """The largest image a frame may be: each side and the pixel count (decoding cost and memory
    grow with the pixels: a 16 MP RGB frame is 48 MB decoded)."""

    max_width: int = 4096
    max_height: int = 4096
    max_pixels: int = DEFAULT_MAX_PIXELS  # 4096 x 4096 (the workers decode under the same cap)

    def describe(self) -> str:
        return f"{self.max_width}x{self.max_height}, {self.max_pixels:,} pixels"


@dataclass(frozen=True)
class LimitsConfig:
    """:class:`ImageLimits` for every app (``SKINFLINT_FRONT_MAX_WIDTH``, ``_MAX_HEIGHT``,
    ``_MAX_PIXELS``) and per app (``SKINFLINT_FRONT_IMAGE_LIMITS``: JSON
    ``{"app": {"max_width": W, "max_height": H, "max_pixels": P}}``, missing fields from the
    default)."""

    default: ImageLimits = ImageLimits()
    per_app: dict[str, ImageLimits] = field(default_factory=dict)

    def for_app(self, app: str) -> ImageLimits:
        return self.per_app.get(app, self.default)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LimitsConfig:
        environ = os.environ if env is None else env
        base = ImageLimits()

        def num(name: str, default: int) -> int:
            raw = environ.get(f"SKINFLINT_FRONT_{name}", "")
            value = int(raw) if raw.strip() else default
            if value < 1:
                raise ValueError(f"SKINFLINT_FRONT_{name} must be a positive integer, not {raw!r}")
            return value

        default = ImageLimits(
            num("MAX_WIDTH", base.max_width),
            num("MAX_HEIGHT", base.max_height),
            num("MAX_PIXELS", base.max_pixels),
        )
        raw = environ.get("SKINFLINT_FRONT_IMAGE_LIMITS", "").strip()
        per_app: dict[str, ImageLimits] = {}
        if raw:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("SKINFLINT_FRONT_IMAGE_LIMITS must be a JSON object of app -> limits")
            for app, lim in doc.items():
                if not isinstance(lim, dict) or set(lim) - {"max_width", "max_height", "max_pixels"}:
                    raise ValueError(
                        f"SKINFLINT_FRONT_IMAGE_LIMITS[{app!r}]: max_width, max_height, max_pixels"
                    )
                values = {k: int(v) for k, v in lim.items()}
                if any(v < 1 for v in values.values()):
                    raise ValueError(f"SKINFLINT_FRONT_IMAGE_LIMITS[{app!r}]: limits must be positive")
                per_app[str(app)] = ImageLimits(
                    values.get("max_width", default.max_width),
                    values.get("max_height", default.max_height),
                    values.get("max_pixels", default.max_pixels),
                )
        return cls(default, per_app)


_MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"II+\x00", "TIFF"),
    (b"MM\x00+", "TIFF"),
    (b"BM", "BMP"),
    (b"RIFF", "WEBP"),  # RIFF....WEBP (or another RIFF file: not a JPEG or PNG either way)
)


def sniff(data: bytes) -> str | None:
    """The image format from the magic bytes (what Pillow would name it), None when unknown."""
    return next((name for magic, name in _MAGIC if data.startswith(magic)), None)


# JPEG start-of-frame markers (baseline, progressive, lossless, ...): not DHT (C4), JPG (C8), DAC (CC)
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM, RSTn: no length field


def image_size(data: bytes, fmt: str) -> tuple[int, int] | None:
    """(width, height) from the header of a PNG (IHDR) or JPEG (the first SOF segment), without
    decoding; None when the header does not say (the decode then finds the image broken)."""
    if fmt == "PNG":
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    return _jpeg_size(data) if fmt == "JPEG" else None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the JPEG's marker segments up to its first start-of-frame (SOF: height, width)."""
    pos = 2
    while pos + 9 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
        elif marker in _STANDALONE:
            pos += 2
        elif marker in (0xD9, 0xDA):  # end of image or start of scan before any frame header
            break
        elif marker in _SOF:
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        else:
            (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
            pos += 2 + length
    return None


def _clean(message: str) -> str:
    """An exception's message fit for a client: no object reprs (heap addresses), one short line."""
    text = _OBJECT_REPR.sub("the image", message).replace("\n", " ").strip()
    return text[:200] or "broken image data"


def check_image(data: bytes, content_type: str, limits: ImageLimits | None = None) -> None:
    """Check, in order of cost: the magic bytes match ``content_type``; the header's size is within
    ``limits``; the image decodes fully with Pillow's decompression-bomb cap at ``limits``' pixels."""
    lim = limits or ImageLimits()
    expected = IMAGE_TYPES[content_type]
    fmt = sniff(data)
    if fmt != expected:
        said = f"the image is {fmt}" if fmt else "its first bytes are not a JPEG or PNG signature"
        raise RequestRejectedError(422, "undecodable_image", f"content type says {content_type} but {said}")
    size = image_size(data, fmt)
    if size is None:
        raise RequestRejectedError(
            422, "undecodable_image", f"the body is not a decodable {content_type}: no image header found"
        )
    _check_size(*size, lim)
    if fmt == "PNG" and _png_streamed(data):
        return  # every byte inflated and checked in 1 MB pieces: no image buffer (48 MB at 16 MP)
    # cold start: Pillow loads on the first image upload (tests/unit/functions/test_lean_imports.py)
    from PIL import Image, UnidentifiedImageError

    try:
        # Image.open raises DecompressionBombError past Pillow's own (global) cap; ours, per app,
        # is checked on the size it read before any pixel is decoded
        with Image.open(BytesIO(data), formats=[expected]) as img:
            _check_size(*img.size, lim)
            if fmt == "JPEG":  # every byte is still entropy-decoded (a truncated one fails), the
                # pixels at 1/8 scale: 1/64 of the memory, about half the CPU of a 16 MP frame
                img.draft(img.mode, (max(1, img.width // 8), max(1, img.height // 8)))
            img.load()
    except RequestRejectedError:
        raise
    except Image.DecompressionBombError as exc:
        raise RequestRejectedError(
            413, "image_too_large", f"the image is over the decoding cap ({lim.describe()})"
        ) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, struct.error, EOFError) as exc:
        raise RequestRejectedError(
            422, "undecodable_image", f"the body is not a decodable {content_type}: {_clean(str(exc))}"
        ) from exc


_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}  # colour type
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_INFLATE_PIECE = 1 << 20  # bytes of pixel data inflated at a time


def _png_streamed(data: bytes) -> bool:
    """True when a non-interlaced PNG checks out as Pillow's decoder would take it, without its
    image buffer: every chunk whole up to IEND, the CRC of every chunk but the image data's, a valid
    header, the image data inflated in 1 MB pieces up to every row its header promises, each row
    with a known filter type. False for anything else (interlaced, a palette image without its
    palette, anything broken): Pillow then decodes it under the same cap and says what is wrong,
    so this is never stricter than Pillow."""
    pos, colour, inflate, total, stride, expected = 8, -1, zlib.decompressobj(), 0, 0, 0
    has_palette = in_data = False
    while pos + 12 <= len(data) and total >= 0:  # total < 0: broken image data
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        whole = pos + 12 + length <= len(data)
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IEND" or not whole:
            return whole and in_data and total >= expected > 0
        if kind == b"IDAT":
            if colour < 0 or (colour == 3 and not has_palette):
                return False
            in_data = True
            total = _inflate_rows(inflate, body, total, stride, expected) if total < expected else total
        elif struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0] != zlib.crc32(kind + body):
            return False
        elif kind == b"IHDR":
            width, height, depth, colour, _comp, _filter, interlace = struct.unpack(">IIBBBBB", body[:13])
            if depth not in _PNG_DEPTHS.get(colour, ()) or length != 13 or interlace:
                return False
            stride = 1 + (width * depth * _PNG_CHANNELS[colour] + 7) // 8
            expected = height * stride
        elif kind == b"PLTE":
            has_palette = True
        pos += 12 + length
    return False  # no IEND, or broken image data


def _inflate_rows(inflate: Any, chunk: bytes, total: int, stride: int, expected: int) -> int:
    """Inflate ``chunk`` in ``_INFLATE_PIECE`` pieces, checking each row's filter byte, until every
    row is there; the bytes of rows seen so far, or -1 when the data is broken."""
    pending = chunk
    while pending and total < expected:
        try:
            out = inflate.decompress(pending, _INFLATE_PIECE)
        except zlib.error:
            return -1
        pending = inflate.unconsumed_tail
        first = (-total) % stride
        if any(byte > 4 for byte in out[first : expected - total : stride]):
            return -1
        total += len(out)
        if inflate.eof:
            break
    return total


def _check_size(width: int, height: int, lim: ImageLimits) -> None:
    if width < 1 or height < 1:
        raise RequestRejectedError(422, "undecodable_image", f"the image header says {width}x{height}")
    if width > lim.max_width or height > lim.max_height or width * height > lim.max_pixels:
        raise RequestRejectedError(
            413,
            "image_too_large",
            f"the image is {width}x{height} ({width * height:,} pixels); this app's limit is "
            f"{lim.describe()}",
        )
