"""Request ids: one post id per POST, one request id per frame of it (issue #25).

A POST to ``/v1/apps/<app>/frames`` carries 1 to 10 frames. The front draws one **post id** for the
POST and gives the frame at index ``i`` of it the **request id** ``post id + f"{i:02x}"``: 32
lowercase hex digits, the shape a request id always had (a uuid4's hex), so the front's id check and
every 404 keep working. All frames of one POST share it (:func:`post_of` of any of their request
ids): the data plane is priced per POST, not per frame.

A post id is 30 lowercase hex digits: the **due minute** of the POST's frames (their latest deadline,
``deadline // 60``: :func:`due_minute`) as 7 digits, then 23 random ones (92 bits). The results table
keeps the POST's item in that minute's partition of the deadline index (core/adapters/results.py),
so a reader finds it from the id alone and the stranded-frame sweeper reads a minute's POSTs with a
Query per shard: there is no separate index item to write.
"""

from __future__ import annotations

import re
import uuid

__all__ = [
    "DUE_BUCKET_S",
    "MAX_FRAMES_PER_POST",
    "POST_ID_LEN",
    "REQUEST_ID",
    "REQUEST_ID_LEN",
    "due_bucket",
    "due_minute",
    "new_post_id",
    "post_of",
    "request_id",
]

#: hex digits of a post id
POST_ID_LEN = 30
#: hex digits of a request id: the post id and the frame's index in the POST (2 digits)
REQUEST_ID_LEN = 32
#: frames one POST may carry (the JSON batch form's limit, front/bodies.py)
MAX_FRAMES_PER_POST = 10
#: seconds of deadlines per due minute (a partition of the results table's deadline index)
DUE_BUCKET_S = 60
_MINUTE_DIGITS = 7  # hex digits of the due minute at the head of a post id: minutes up to 2480

_POST_ID = re.compile(r"[0-9a-f]{30}")
REQUEST_ID = re.compile(r"[0-9a-f]{32}")  # what a request id looks like


def due_bucket(deadline: float) -> int:
    """The due minute (minutes since the epoch) of a deadline: the deadline index's bucket."""
    return int(deadline // DUE_BUCKET_S)


def new_post_id(deadline: float) -> str:
    """A fresh post id for a POST whose frames' latest deadline is ``deadline`` (epoch seconds): its
    due minute as 7 hex digits, then 23 random ones (of a uuid4's random bits)."""
    minute = due_bucket(deadline)
    if not 0 <= minute < 16**_MINUTE_DIGITS:
        raise ValueError(f"a deadline of {deadline!r} s has no due minute of {_MINUTE_DIGITS} hex digits")
    return f"{minute:0{_MINUTE_DIGITS}x}{uuid.uuid4().hex[: POST_ID_LEN - _MINUTE_DIGITS]}"


def due_minute(post_id: str) -> int:
    """The due minute a post id carries (:func:`new_post_id`). Raises ValueError for a malformed id."""
    if not _POST_ID.fullmatch(post_id):
        raise ValueError(f"not a post id (30 lowercase hex digits): {post_id[:64]!r}")
    return int(post_id[:_MINUTE_DIGITS], 16)


def request_id(post_id: str, index: int) -> str:
    """The request id of the frame at ``index`` (0-based) of the POST ``post_id``: the post id and
    the index as 2 hex digits. Raises ValueError for a malformed post id or an index out of range
    (0 .. ``MAX_FRAMES_PER_POST - 1``)."""
    if not _POST_ID.fullmatch(post_id):
        raise ValueError(f"not a post id (30 lowercase hex digits): {post_id[:64]!r}")
    if not 0 <= index < MAX_FRAMES_PER_POST:
        raise ValueError(f"a POST holds at most {MAX_FRAMES_PER_POST} frames: no index {index}")
    return f"{post_id}{index:02x}"


def post_of(request_id: str) -> str:
    """The post id of ``request_id`` (its first 30 digits): the results partition it lives in, shared
    with the other frames of its POST. Raises ValueError for anything but 32 lowercase hex digits."""
    if not REQUEST_ID.fullmatch(request_id):
        raise ValueError(f"not a request id (32 lowercase hex digits): {request_id[:64]!r}")
    return request_id[:POST_ID_LEN]
