"""Request ids per POST (core/ids.py): one post id per POST, the frame's index appended."""

from __future__ import annotations

import re

import pytest

from core.ids import MAX_FRAMES_PER_POST, due_bucket, due_minute, new_post_id, post_of, request_id

DUE = 1_795_000_000.0  # a deadline in 2026


def test_a_post_id_is_its_due_minute_and_23_random_hex_digits() -> None:
    ids = {new_post_id(DUE) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{30}", post) for post in ids)
    assert {due_minute(post) for post in ids} == {due_bucket(DUE)} == {int(DUE // 60)}
    assert {post[:7] for post in ids} == {f"{int(DUE // 60):07x}"}


@pytest.mark.parametrize("deadline", [-60.0, 16**7 * 60.0])
def test_a_deadline_without_a_7_digit_due_minute_is_refused(deadline: float) -> None:
    with pytest.raises(ValueError, match="due minute"):
        new_post_id(deadline)


def test_due_minute_of_a_malformed_post_id_raises() -> None:
    with pytest.raises(ValueError, match="post id"):
        due_minute("xyz")


def test_the_frames_of_a_post_share_its_id_and_differ_by_index() -> None:
    post = new_post_id(DUE)
    rids = [request_id(post, i) for i in range(MAX_FRAMES_PER_POST)]
    # 32 lowercase hex digits, as a uuid4's hex was: the front's id check and its 404s still hold
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in rids)
    assert [rid[30:] for rid in rids] == ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09"]
    assert {post_of(rid) for rid in rids} == {post}


@pytest.mark.parametrize("index", [-1, MAX_FRAMES_PER_POST, 256])
def test_an_index_out_of_a_posts_range_is_refused(index: int) -> None:
    with pytest.raises(ValueError, match="at most"):
        request_id(new_post_id(DUE), index)


@pytest.mark.parametrize("post", ["", "0" * 29, "0" * 31, "G" * 30, "A" * 30])
def test_a_malformed_post_id_is_refused(post: str) -> None:
    with pytest.raises(ValueError, match="post id"):
        request_id(post, 0)


@pytest.mark.parametrize("rid", ["", "0" * 30, "0" * 31, "0" * 33, "F" * 32, "x" * 32, "warm-up"])
def test_post_of_a_malformed_request_id_raises(rid: str) -> None:
    with pytest.raises(ValueError, match="request id"):
        post_of(rid)
