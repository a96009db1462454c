"""Request ids per POST (core/ids.py): one post id per POST, the frame's index appended."""

from __future__ import annotations

import re

import pytest

from core.ids import MAX_FRAMES_PER_POST, new_post_id, post_of, request_id


def test_a_post_id_is_30_random_hex_digits() -> None:
    ids = {new_post_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{30}", post) for post in ids)


def test_the_frames_of_a_post_share_its_id_and_differ_by_index() -> None:
    post = new_post_id()
    rids = [request_id(post, i) for i in range(MAX_FRAMES_PER_POST)]
    # 32 lowercase hex digits, as a uuid4's hex was: the front's id check and its 404s still hold
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in rids)
    assert [rid[30:] for rid in rids] == ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09"]
    assert {post_of(rid) for rid in rids} == {post}


@pytest.mark.parametrize("index", [-1, MAX_FRAMES_PER_POST, 256])
def test_an_index_out_of_a_posts_range_is_refused(index: int) -> None:
    with pytest.raises(ValueError, match="at most"):
        request_id(new_post_id(), index)


@pytest.mark.parametrize("post", ["", "0" * 29, "0" * 31, "G" * 30, "A" * 30])
def test_a_malformed_post_id_is_refused(post: str) -> None:
    with pytest.raises(ValueError, match="post id"):
        request_id(post, 0)


@pytest.mark.parametrize("rid", ["", "0" * 30, "0" * 31, "0" * 33, "F" * 32, "x" * 32, "warm-up"])
def test_post_of_a_malformed_request_id_raises(rid: str) -> None:
    with pytest.raises(ValueError, match="request id"):
        post_of(rid)
