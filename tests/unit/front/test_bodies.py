"""Bodies within limits: the byte cap while streaming, JSON depth and number size (front/bodies.py),
and the front's answers to them (in process, fakes behind it)."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from front.bodies import MAX_JSON_DEPTH, parse_json, read_capped
from front.errors import RequestRejectedError
from tests.unit.front.fakes import client, jpeg, service

AUTH = {"x-api-key": "key-a"}
URL = "/v1/apps/traffic/frames"


def test_a_body_is_refused_as_soon_as_it_passes_the_cap_and_the_rest_is_never_read():
    pulled = 0

    async def endless():
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * 65_536

    with pytest.raises(RequestRejectedError) as err:
        asyncio.run(read_capped(endless(), 1_000_000))
    assert (err.value.status, err.value.error) == (413, "too_large")
    assert pulled == 16  # 16 x 65,536 = 1,048,576 > 1,000,000: the 16th chunk is the last read


def test_a_body_within_the_cap_is_read_whole():
    async def two():
        yield b"ab"
        yield b"cd"

    assert asyncio.run(read_capped(two(), 4)) == b"abcd"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "bytes outside its strings"),  # 200,000 > 16,384
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested 17 deep"),
        (b'{"frames": ' + b"9" * 5_000 + b"}", "5000 characters"),
        (b'{"frames": 1e99999}', "not JSON"),
        (b'{"frames": NaN}', "NaN is not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"frames": [', "not JSON"),
    ],
)
def test_hostile_json_is_a_400_naming_what_is_wrong(body, says):
    with pytest.raises(RequestRejectedError) as err:
        parse_json(body)
    assert (err.value.status, err.value.error) == (400, "malformed_json")
    assert says in err.value.reason


def test_brackets_inside_strings_do_not_count_as_depth():
    doc = {"frames": [{"image_b64": "[[[[{{{{" * 100, "note": 'say "[" \\ ]'}]}
    assert parse_json(json.dumps(doc).encode()) == doc


def test_a_batch_of_ten_large_frames_parses():
    frame = base64.b64encode(b"\x00" * 400_000).decode()
    doc = {"frames": [{"image_b64": frame, "content_type": "image/jpeg"}] * 10}
    assert len(parse_json(json.dumps(doc).encode())["frames"]) == 10


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"frames": [{"image_b64": "aGk=", "x": ' + b"9" * 5_000 + b"}]}",
        b'{"frames": ' + b'{"a": ' * 1_000 + b"1" + b"}" * 1_000 + b"}",
    ],
)
def test_the_front_answers_hostile_json_with_400_never_500(body):
    svc = service()
    c = client(svc)
    r = c.post(URL, content=body, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "malformed_json"
    assert svc.metrics.total("FrontRejected") == 1


def test_a_chunked_body_over_the_cap_is_413_without_content_length():
    svc = service()
    svc.config = svc.config.__class__(max_body_bytes=100_000)
    c = client(svc)

    def chunks():
        for _ in range(50):
            yield b"\xff" * 10_000

    r = c.post(URL, content=chunks(), headers={**AUTH, "content-type": "image/jpeg"})
    assert r.status_code == 413, r.text
    assert r.json()["error"] == "too_large" and "100000" in r.json()["reason"]


def test_a_valid_frame_still_goes_through():
    svc = service()
    r = client(svc).post(URL, content=jpeg(), headers={**AUTH, "content-type": "image/jpeg"})
    assert r.status_code == 202, r.text


@pytest.mark.parametrize("body", [b'"\\"' * 500_000, b'["' + b"a\\" * 500_000, b'"' * 1_000_001])
def test_unterminated_strings_cost_one_pass(body):
    # each quote would start a new scan to the end if an unterminated string did not match: 10^12 steps
    with pytest.raises(RequestRejectedError) as err:
        parse_json(body)
    assert err.value.error == "malformed_json"
