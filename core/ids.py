"""Request ids: one post id per POST, one request id per frame of it (issue #25).

A POST to ``/v1/apps/<app>/frames`` carries 1 to 10 frames. The front draws one **post id** for the
POST (30 lowercase hex digits, random) and gives the frame at index ``i`` of it the **request id**
``post id + f"{i:02x}"``: 32 lowercase hex digits, the shape a request id always had (a uuid4's
hex), so the front's id check and every 404 keep working. All frames of one POST share one results
partition, keyed by the post id (:func:`post_of` of any of their request ids): the data plane is
priced per POST, not per frame.
"""

from __future__ import annotations

import re
import uuid

__all__ = [
    "MAX_FRAMES_PER_POST",
    "POST_ID_LEN",
    "REQUEST_ID",
    "REQUEST_ID_LEN",
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

_POST_ID = re.compile(r"[0-9a-f]{30}")
REQUEST_ID = re.compile(r"[0-9a-f]{32}")  # what a request id looks like


def new_post_id() -> str:
    """A fresh post id: 30 random lowercase hex digits (120 of a uuid4's bits, 114 of them random),
    the results partition every frame of the POST shares."""
    return uuid.uuid4().hex[:POST_ID_LEN]


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
