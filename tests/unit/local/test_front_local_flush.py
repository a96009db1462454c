"""The local front (uvicorn) flushes EMF metrics after every answered request, as the Lambda handler
does after every invocation; PutMetricData metrics keep their own flush thread."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from core.adapters.metrics import EmfMetrics, MemoryMetrics
from skinflint.local.front import FlushAfterRequest


async def _ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def _call(app: Any, kind: str = "http") -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(_msg: dict[str, Any]) -> None:
        return None

    asyncio.run(app({"type": kind}, receive, send))


def test_emf_metrics_are_flushed_after_each_request() -> None:
    lines: list[str] = []
    metrics = EmfMetrics("NS", write=lines.append)
    holder = {"svc": SimpleNamespace(metrics=metrics)}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        metrics.put("FramesAccepted", 1, App="a")
        await _ok(scope, receive, send)

    wrapped = FlushAfterRequest(app, holder)
    _call(wrapped)
    _call(wrapped)
    assert len(lines) >= 2 and all('"FramesAccepted"' in x for x in lines)
    _call(wrapped, kind="lifespan")  # not a request: nothing put, nothing written
    assert len(lines) >= 2


def test_other_metrics_are_left_to_their_own_flush() -> None:
    metrics = MemoryMetrics()
    holder = {"svc": SimpleNamespace(metrics=metrics)}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        metrics.put("FramesAccepted", 1, App="a")
        await _ok(scope, receive, send)

    _call(FlushAfterRequest(app, holder))
    assert metrics.drain()  # still held: the middleware did not drain them
