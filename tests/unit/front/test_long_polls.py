"""Long polls (``GET /v1/requests/{id}?wait=S``) hold no thread, read at a bounded rate and are
capped per key (in process: the ASGI app over httpx, fakes behind it)."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from core.schema import ResultOut
from front.app import create_app
from front.service import _poll_delays
from tests.unit.front.fakes import client, service

RID = "0" * 32


def _queued(svc, rid: str = RID) -> None:
    svc.results.frames[rid] = ResultOut(
        request_id=rid, app="traffic", status="queued", accepted_at=0, deadline=1
    )


def test_the_poll_backs_off_to_one_read_a_second():
    delays = [d for _, d in zip(range(12), _poll_delays(), strict=False)]
    assert delays[0] == pytest.approx(0.1) and delays[-1] == pytest.approx(1.0)
    # 0.1, 0.15, 0.225, 0.34, 0.51, 0.76, then 1 s: 20 s of waiting costs 6 + 16 = 22 reads at most
    assert sum(1 for d in delays if d < 1.0) == 6


async def _run_polls(svc, polls: int, wait_s: float) -> tuple[list[int], list[float], int]:
    app = create_app(lambda: svc)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://front") as c:
        # the key is read once (then trusted for 10 s): the polls below find it known
        assert (await c.get(f"/v1/requests/{RID}", headers={"x-api-key": "key-a"})).status_code == 200
        threads = threading.active_count()

        async def poll() -> int:
            r = await c.get(f"/v1/requests/{RID}", params={"wait": wait_s}, headers={"x-api-key": "key-a"})
            return r.status_code

        async def health() -> list[float]:
            out = []
            await asyncio.sleep(0.2)  # the polls are open
            for _ in range(40):
                t0 = time.perf_counter()
                r = await c.get("/healthz")
                out.append(time.perf_counter() - t0)
                assert r.status_code == 200
                await asyncio.sleep(0.02)
            return out

        tasks = [asyncio.create_task(poll()) for _ in range(polls)]
        lat = await health()
        peak = threading.active_count() - threads
        codes = await asyncio.gather(*tasks)
    return list(codes), lat, peak


def test_a_hundred_long_polls_hold_no_thread_and_healthz_stays_fast():
    # GIVEN a frame that stays queued; WHEN 100 clients long-poll it for 2 s while /healthz is probed
    svc = service(max_waiters_per_key=200)
    _queued(svc)
    codes, lat, peak = asyncio.run(_run_polls(svc, 100, 2.0))
    # THEN every poll ends with the frame still queued after its wait, /healthz answers at once
    assert codes == [200] * 100
    lat.sort()
    p99 = lat[int(0.99 * (len(lat) - 1))]
    print(
        f"\n/healthz with 100 open long polls: p50 {lat[len(lat) // 2] * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms"
    )
    assert p99 <= 0.1
    # no thread per poll: the reads share the default executor's few threads
    assert peak <= 20
    # and each poll read about 8 times in 2 s (0.1 + 0.15 + 0.225 + 0.34 + 0.51 + 0.76 = 2.085 > 2)
    assert svc.results.reads <= 100 * 8


def test_polls_beyond_a_keys_cap_are_429():
    svc = service(max_waiters_per_key=5)
    _queued(svc)
    codes, _, _ = asyncio.run(_run_polls(svc, 8, 0.5))
    assert sorted(codes) == [200] * 5 + [429] * 3
    assert svc._waiters == {}  # every poll gave its place back


def test_a_done_result_ends_the_poll_at_once():
    svc = service()
    svc.results.frames[RID] = ResultOut(
        request_id=RID, app="traffic", status="done", accepted_at=0, deadline=1, finished_at=0.5
    )
    t0 = time.perf_counter()
    assert asyncio.run(svc.wait_result(RID, 20.0, "key-a")).status == "done"
    assert time.perf_counter() - t0 < 1.0
    assert svc.results.reads == 1


def test_reads_are_rate_limited_per_key():
    # GIVEN 2 reads/s with a burst of 3 for each key, on a fixed clock
    svc = service(read_rate_per_s=2.0, read_burst=3.0)
    _queued(svc)
    c = client(svc)
    codes = [c.get(f"/v1/requests/{RID}", headers={"x-api-key": "key-a"}).status_code for _ in range(4)]
    codes.append(c.get("/v1/apps", headers={"x-api-key": "key-a"}).status_code)
    assert codes == [200, 200, 200, 429, 429]
    r = c.get("/v1/apps", headers={"x-api-key": "key-a"})
    assert r.json()["error"] == "rate_limited" and r.headers["retry-after"] == "1"
    assert c.get("/v1/apps", headers={"x-api-key": "key-b"}).status_code == 200  # another key is not limited
    svc.clock.now += 0.5  # one token back
    assert c.get("/v1/apps", headers={"x-api-key": "key-a"}).status_code == 200


def test_the_frames_of_a_post_that_finished_together_cost_one_read():
    """A Query of a POST's partition reads every frame of it: the finished ones (final) are kept a
    few seconds for their own GETs; a queued one is read again."""
    svc = service()
    post = "1" * 30
    rids = [post + f"{i:02x}" for i in range(4)]
    for i, rid in enumerate(rids):
        svc.results.frames[rid] = ResultOut(
            request_id=rid, app="traffic", status="queued" if i == 3 else "done", accepted_at=0, deadline=1
        )
    _queued(svc, "2" * 32)  # another POST's frame: never served from this POST's read
    with client(svc) as c:
        for rid in rids[:3]:
            got = c.get(f"/v1/requests/{rid}", headers={"x-api-key": "key-a"})
            assert got.status_code == 200 and got.json()["status"] == "done"
        assert svc.results.reads == 1  # the first GET's read served the other two
        assert c.get(f"/v1/requests/{rids[3]}", headers={"x-api-key": "key-a"}).json()["status"] == "queued"
        assert svc.results.reads == 2  # queued when read: not kept, read again
        # that read kept the finished siblings again; a kept result serves one GET, the next reads
        for reads in (2, 3):
            assert c.get(f"/v1/requests/{rids[1]}", headers={"x-api-key": "key-a"}).status_code == 200
            assert svc.results.reads == reads
