"""What a child request carries: its crop of its parent's input, not the whole frame (issue #25).

A parent request's children are deterministic (how many of each child module and each one's box:
:func:`core.routing.child_count`, :func:`core.routing.child_region`), so the parent's worker cuts
them while it prepares the parent's input, from the image it decodes for its own model (one decode,
on the preparer thread, while the batch window is open): each child's box at the frame's original
resolution (not the parent's model-sized input), encoded as JPEG for a JPEG source (with the
source's own quantisation tables and chroma subsampling: the source's quality, no more bytes than
it needs) and as PNG otherwise. The child's payload is that crop, its ``region`` None (the whole
crop): its worker decodes only the crop and does not crop again. A grandchild's box is then a box
of its parent's crop (an object inside a detected object), as in a real DAG.

Encoding is deterministic: a redelivered parent forwards byte-identical children. A crop travels
inline while its base64 fits the frame inline limit (``SKINFLINT_INLINE_LIMIT_BYTES``, the front's),
else it is written to S3 under ``frames/<request id>/<child task>`` (the frames' prefix: the same
one-day expiry, the child's worker reads it like a frame).

Every worker cuts crops, whatever its runtime: an emulated runtime (a GPU class emulated without a
GPU, the demo's and the tests' runtimes) does not decode its input, but the worker still decodes it
to cut its children's crops, so the data plane (message sizes, S3 spills) is the one a real model
would see; a module without children never decodes for this. A payload that is not a JPEG or PNG
(a synthetic payload of bytes), does not decode, or is over the worker's pixel cap
(``SKINFLINT_WORKER_MAX_PIXELS``: never decoded) is forwarded as before: the whole payload with the
child's region, which the child's worker crops (a real model refuses such a frame itself)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Any

from core.routing import child_count, child_region
from core.schema import Payload
from core.settings import worker_max_pixels_from_env

if TYPE_CHECKING:
    from collections.abc import Sequence

    from core.adapters.blobs import BlobStore
    from core.schema import TaskMessage

__all__ = [
    "Crop",
    "DecodedFrame",
    "child_boxes",
    "child_input",
    "cut_crops",
    "message_child_input",
    "open_frame",
    "region_box",
]

_FORMATS = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"))
_CONTENT_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png"}
JPEG_FALLBACK_QUALITY = 90  # a JPEG whose tables cannot be reused (grayscale, CMYK) is encoded at this


@dataclass(frozen=True)
class Crop:
    """One child's input: encoded image bytes and their content type."""

    data: bytes
    content_type: str


@dataclass(frozen=True)
class DecodedFrame:
    """A decoded payload: the RGB image (PIL) at its own resolution and what its crops are encoded
    like (the source's format, a JPEG's tables and subsampling)."""

    image: Any  # PIL.Image.Image, RGB
    fmt: str  # "JPEG" | "PNG"
    jpeg_options: dict[str, Any]


def _sniff(data: bytes) -> str | None:
    return next((name for magic, name in _FORMATS if data.startswith(magic)), None)


def region_box(region: Sequence[float], width: int, height: int) -> tuple[int, int, int, int]:
    """The pixel box of ``region`` (fractions x0, y0, x1, y1) in a ``width`` x ``height`` image, as
    :func:`workers.runtimes.decode_frame` crops it."""
    x0, y0, x1, y1 = region
    return (int(x0 * width), int(y0 * height), max(int(x1 * width), 1), max(int(y1 * height), 1))


def open_frame(data: bytes, max_pixels: int | None = None) -> DecodedFrame:
    """Decode JPEG/PNG bytes to RGB. Raises ValueError for another format, a frame whose header names
    more than ``max_pixels`` (default ``SKINFLINT_WORKER_MAX_PIXELS``; refused before it is decoded),
    or bytes that do not decode."""
    from PIL import Image, JpegImagePlugin  # only a worker with children or a real model decodes

    fmt = _sniff(data)
    if fmt is None:
        raise ValueError("the payload is not a JPEG or PNG")
    cap = worker_max_pixels_from_env() if max_pixels is None else max_pixels
    try:
        with Image.open(BytesIO(data), formats=[fmt]) as img:  # reads the header only
            width, height = img.size
            if width * height > cap:
                raise ValueError(
                    f"a frame of {width}x{height} pixels is over the worker's cap of {cap:,} pixels"
                )
            options: dict[str, Any] = {}
            if fmt == "JPEG":
                tables = getattr(img, "quantization", None) or {}
                sampling = JpegImagePlugin.get_sampling(img)
                if img.mode in ("RGB", "YCbCr") and len(tables) >= 2 and sampling >= 0:
                    options = {"qtables": [list(tables[k]) for k in sorted(tables)], "subsampling": sampling}
            rgb = img.convert("RGB")  # decodes
    except ValueError:
        raise
    except Image.DecompressionBombError as exc:  # past Pillow's own cap (179 MP): never decoded
        raise ValueError(f"a frame over the worker's cap of {cap:,} pixels: {exc}") from exc
    except (OSError, SyntaxError, EOFError) as exc:
        raise ValueError(f"the payload does not decode: {exc}") from exc
    return DecodedFrame(rgb, fmt, options)


def _encode(image: Any, frame: DecodedFrame) -> Crop:
    buf = BytesIO()
    if frame.fmt == "JPEG":
        if frame.jpeg_options:
            image.save(buf, format="JPEG", **frame.jpeg_options)
        else:
            image.save(buf, format="JPEG", quality=JPEG_FALLBACK_QUALITY)
    else:
        image.save(buf, format="PNG")
    return Crop(buf.getvalue(), _CONTENT_TYPES[frame.fmt])


def cut_crops(frame: DecodedFrame, regions: Sequence[Sequence[float]]) -> list[Crop]:
    """Each region of ``frame`` (fractions of it) cut at the frame's resolution and encoded like it."""
    width, height = frame.image.size
    return [_encode(frame.image.crop(region_box(region, width, height)), frame) for region in regions]


def child_input(
    parent: Payload,
    region: list[float],
    crop: Crop | None,
    *,
    request_id: str,
    task_id: str,
    blobs: BlobStore,
    inline_limit_bytes: int,
) -> tuple[Payload, list[float] | None]:
    """A child's ``(payload, region)``: its crop (inline when its base64 fits ``inline_limit_bytes``,
    else written to S3 under ``frames/<request_id>/<task_id>``) and no region; without a crop (its
    parent's payload is not an image this worker decodes), the parent's payload and the region."""
    if crop is None:
        return parent, region
    b64 = base64.b64encode(crop.data).decode()
    if len(b64) <= inline_limit_bytes:
        return Payload(content_type=crop.content_type, size=len(crop.data), inline_b64=b64), None
    key = f"frames/{request_id}/{task_id.replace('/', '_')}"
    blobs.put(key, crop.data, crop.content_type)
    return Payload(content_type=crop.content_type, size=len(crop.data), s3_key=key), None


def child_boxes(task_key: str, children: Sequence[tuple[str, float]]) -> list[tuple[str, int, list[float]]]:
    """``(child, index, region)`` of each child request the task ``task_key`` forwards to
    ``children`` (child module, fan-out): deterministic (:func:`core.routing.child_count`,
    :func:`core.routing.child_region`)."""
    return [
        (child, index, child_region(task_key, child, index))
        for child, fan in children
        for index in range(child_count(task_key, child, fan))
    ]


def message_child_input(
    message: TaskMessage,
    child: str,
    index: int,
    crop: Crop | None,
    *,
    blobs: BlobStore,
    inline_limit_bytes: int,
) -> tuple[Payload, list[float] | None]:
    """What the ``index``-th ``child`` request of ``message`` carries: its crop (region None), or
    without one (a payload the parent's worker does not decode; a child added by a newer plan
    version since the parent was prepared) the parent's payload and the child's region."""
    return child_input(
        message.payload,
        child_region(message.idempotency_key, child, index),
        crop,
        request_id=message.request_id,
        task_id=f"{message.task_id}/{child}.{index}",
        blobs=blobs,
        inline_limit_bytes=inline_limit_bytes,
    )
