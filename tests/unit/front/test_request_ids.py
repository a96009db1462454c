"""The front gives one POST one post id and each of its frames ``post id + index`` (core/ids.py)."""

from __future__ import annotations

import base64
import re

import pytest

from core.ids import post_of
from front.errors import RequestRejectedError
from tests.unit.front.fakes import client, jpeg, service

AUTH = {"x-api-key": "key-a"}


def test_the_frames_of_one_post_share_its_id_and_two_posts_do_not() -> None:
    svc = service()
    c = client(svc)
    body = {"frames": [{"image_b64": base64.b64encode(jpeg(32 + i)).decode()} for i in range(10)]}
    first = c.post("/v1/apps/traffic/frames", json=body, headers=AUTH)
    assert first.status_code == 202, first.text
    rids = [a["request_id"] for a in first.json()["accepted"]]
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in rids)
    assert len({post_of(rid) for rid in rids}) == 1
    assert [rid[30:] for rid in rids] == [f"{i:02x}" for i in range(10)]
    # every frame is recorded and its task carries its own id
    assert set(svc.results.frames) == set(rids)  # type: ignore[attr-defined]
    sent = [m.request_id for msgs in svc.queues.sent.values() for m in msgs]  # type: ignore[attr-defined]
    assert sorted(sent) == sorted(rids)
    single = c.post("/v1/apps/traffic/frames", content=jpeg(), headers={**AUTH, "content-type": "image/jpeg"})
    (one,) = [a["request_id"] for a in single.json()["accepted"]]
    assert one.endswith("00") and post_of(one) != post_of(rids[0])
    # each id reads back; a malformed one is a 404, never a read
    assert c.get(f"/v1/requests/{rids[9]}", headers=AUTH).json()["status"] == "queued"
    assert c.get(f"/v1/requests/{rids[9][:30]}", headers=AUTH).status_code == 404


def test_more_frames_than_a_post_holds_are_refused_before_anything_is_stored() -> None:
    svc = service()
    with pytest.raises(RequestRejectedError) as refused:
        svc.accept("traffic", [(jpeg(), "image/jpeg")] * 11)
    assert (refused.value.status, refused.value.error) == (400, "malformed_json")
    assert svc.results.frames == {}  # type: ignore[attr-defined]
