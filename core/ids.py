"""Request ids: every frame of one POST shares the POST's id as its prefix.

A request id is 32 lowercase hex characters: the POST's id (30, random) and the frame's index in
the POST (2). The results table keeps a POST's frames and every result record of them in one
partition keyed by the POST's id (``core/adapters/results.py``), so the front writes one item per
POST and a reader finds a frame's results with one Query of that partition."""

from __future__ import annotations

import re
import uuid

__all__ = ["POST_ID_CHARS", "REQUEST_ID", "new_post_id", "post_of", "request_id"]

POST_ID_CHARS = 30
MAX_FRAMES_PER_POST = 256  # two hex digits of index
REQUEST_ID = re.compile(r"[0-9a-f]{32}")


def new_post_id() -> str:
    """A fresh POST id (30 random hex characters: 120 bits)."""
    return uuid.uuid4().hex[:POST_ID_CHARS]


def request_id(post_id: str, index: int) -> str:
    """The request id of the ``index``-th frame of POST ``post_id``."""
    if len(post_id) != POST_ID_CHARS or not 0 <= index < MAX_FRAMES_PER_POST:
        raise ValueError(f"no request id for POST {post_id!r} frame {index}")
    return f"{post_id}{index:02x}"


def post_of(rid: str) -> str:
    """The POST id a request id belongs to; ValueError for anything not a request id."""
    if not REQUEST_ID.fullmatch(rid):
        raise ValueError(f"not a request id: {rid[:40]!r}")
    return rid[:POST_ID_CHARS]
