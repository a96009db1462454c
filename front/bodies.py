"""Request bodies read and parsed within limits: a hard byte cap while streaming (a chunked body
without Content-Length is never buffered past it) and JSON with a nesting depth and a number size
cap (a 100,000-deep document or a 5,000-digit integer is a 400, not a RecursionError or a
ValueError turned 500)."""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

from front.errors import RequestRejectedError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["MAX_JSON_DEPTH", "MAX_NUMBER_CHARS", "BodyTooLargeError", "parse_json", "read_capped"]

MAX_JSON_DEPTH = 16  # a frame batch is 3 deep ({"frames": [{...}]})
MAX_NUMBER_CHARS = 64  # characters of one JSON number (no field of a batch is a number)
#: bytes of a JSON document outside its strings: a batch of 10 frames has about 400
MAX_STRUCTURE_BYTES = 16_384
# a JSON string, escapes included, or an unterminated one up to the end (which always matches, so a
# body of unterminated strings costs one pass, not one per quote); unrolled, so linear
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)


class BodyTooLargeError(RequestRejectedError):
    def __init__(self, size: int, cap: int, declared: bool):
        how = "declared" if declared else "received so far"
        super().__init__(413, "too_large", f"body of {size} bytes ({how}) exceeds {cap}")


async def read_capped(chunks: AsyncIterator[bytes], cap: int) -> bytes:
    """The body from its chunks, refused (:class:`BodyTooLargeError`) as soon as it passes ``cap``
    bytes: what was received is dropped, the rest never read."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        if len(buf) > cap:
            raise BodyTooLargeError(len(buf), cap, declared=False)
    return bytes(buf)


def _depth(structure: bytes) -> int:
    depth = deepest = 0
    for byte in structure:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def _number(text: str) -> float | int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters (limit {MAX_NUMBER_CHARS})")
    if not any(c in text for c in ".eE"):
        return int(text)
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def parse_json(body: bytes) -> Any:
    """The JSON document in ``body``, or a 400 ``malformed_json`` naming the limit it broke: the
    structure outside strings (its depth is counted on that, at most ``MAX_STRUCTURE_BYTES``),
    ``MAX_JSON_DEPTH`` levels, numbers of ``MAX_NUMBER_CHARS`` characters."""
    structure = _STRING.sub(b'""', body)
    if len(structure) > MAX_STRUCTURE_BYTES:
        raise RequestRejectedError(
            400,
            "malformed_json",
            f"the JSON has {len(structure)} bytes outside its strings (limit {MAX_STRUCTURE_BYTES})",
        )
    depth = _depth(structure)
    if depth > MAX_JSON_DEPTH:
        raise RequestRejectedError(
            400, "malformed_json", f"the JSON is nested {depth} deep (limit {MAX_JSON_DEPTH})"
        )
    try:
        return json.loads(body, parse_int=_number, parse_float=_number, parse_constant=_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RequestRejectedError(400, "malformed_json", f"the body is not JSON: {_short(exc)}") from exc


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _short(exc: BaseException) -> str:
    return str(exc).replace("\n", " ")[:200]
