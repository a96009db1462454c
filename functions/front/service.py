"""The front's logic, free of HTTP: authenticate, validate frames, dispatch them (TC time windows)
and enqueue; read results. Adapters are injected; the FastAPI routes only translate."""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from functions.adapters.results import FrameRecord
from functions.errors import DataPlaneError
from functions.routing import Router
from functions.schema import FrameAccepted, FramesAccepted, Payload, ResultOut

if TYPE_CHECKING:
    from collections.abc import Callable

    from functions.adapters.blobs import BlobStore
    from functions.adapters.config_store import ConfigStore
    from functions.adapters.metrics import Metrics
    from functions.adapters.queues import TaskQueues
    from functions.adapters.results import ResultStore
    from functions.routing import Route
    from functions.settings import DataPlaneConfig

__all__ = ["FrontService", "Rejection"]

IMAGE_TYPES = {"image/jpeg": "JPEG", "image/png": "PNG"}
_CACHE_TTL_S = 10.0


class Rejection(DataPlaneError):
    """A request the front refuses: HTTP ``status``, a short ``error`` code and a ``reason``."""

    def __init__(self, status: int, error: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


def check_image(data: bytes, content_type: str) -> None:
    """Decode the image fully (a truncated JPEG passes a header check); raise :class:`Rejection`."""
    from io import BytesIO

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(BytesIO(data)) as img:
            fmt = img.format
            img.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise Rejection(
            422, "undecodable_image", f"the body is not a decodable {content_type}: {exc}"
        ) from exc
    if fmt != IMAGE_TYPES[content_type]:
        raise Rejection(422, "undecodable_image", f"content type says {content_type} but the image is {fmt}")


@dataclass
class FrontService:
    config: DataPlaneConfig
    store: ConfigStore
    results: ResultStore
    queues: TaskQueues
    blobs: BlobStore
    metrics: Metrics
    clock: Callable[[], float] = time.time
    _routers: dict[str, tuple[float, Router | None]] = field(default_factory=dict)
    _keys: dict[str, float] = field(default_factory=dict)

    # -- auth and config ---------------------------------------------------------------------------
    def authenticate(self, key: str | None) -> None:
        if not key:
            self.reject(401, "missing_api_key", "send the API key in the x-api-key header")
        now = self.clock()
        if self._keys.get(key, 0.0) > now:
            return
        if not self.store.api_key_known(key):
            self.reject(403, "wrong_api_key", "the API key is not known")
        self._keys[key] = now + _CACHE_TTL_S

    def router(self, app: str) -> Router:
        now = self.clock()
        cached = self._routers.get(app)
        if cached is None or cached[0] < now:
            dep = self.store.get_deployment(app)
            cached = (now + _CACHE_TTL_S, Router.for_deployment(dep) if dep else None)
            self._routers[app] = cached
        if cached[1] is None:
            self.reject(404, "unknown_app", f"no app named {app!r} is deployed")
        assert cached[1] is not None
        return cached[1]

    def list_apps(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for name in self.store.list_apps():
            d = self.router(name).deployment
            out.append(
                {
                    "name": name,
                    "slo_s": d.slo_s,
                    "frame_rate": d.frame_rate,
                    "roots": d.roots,
                    "modules": list(d.plan.modules),
                    "emulated_hardware": d.emulated_hardware,
                }
            )
        return out

    def reject(self, status: int, error: str, reason: str) -> None:
        self.metrics.put("FrontRejected", 1, Reason=error)
        raise Rejection(status, error, reason)

    # -- frames ------------------------------------------------------------------------------------
    def accept(self, app: str, frames: list[tuple[bytes, str]]) -> FramesAccepted:
        """Validate every frame first (all or nothing), then store, record and enqueue them."""
        router = self.router(app)
        for data, content_type in frames:
            if content_type not in IMAGE_TYPES:
                self.reject(415, "unsupported_media_type", f"{content_type!r} is not image/jpeg or image/png")
            if len(data) > self.config.max_body_bytes:
                self.reject(
                    413, "too_large", f"a frame is {len(data)} bytes, limit {self.config.max_body_bytes}"
                )
            try:
                check_image(data, content_type)
            except Rejection as rej:
                self.reject(rej.status, rej.error, rej.reason)
        now = self.clock()
        dep = router.deployment
        records: list[FrameRecord] = []
        by_queue: dict[str, list] = {}
        accepted: list[FrameAccepted] = []
        for data, content_type in frames:
            request_id = uuid.uuid4().hex
            payload = self._payload(request_id, data, content_type)
            deadline = now + dep.slo_s
            t0 = time.perf_counter()
            routes: list[Route] = [router.route(m, now) for m in dep.roots]
            self.metrics.put("DispatchMs", (time.perf_counter() - t0) * 1e3, "Milliseconds", App=app)
            for r in routes:
                msg = router.task(
                    r,
                    request_id=request_id,
                    task_id=r.module,
                    accepted_at=now,
                    enqueued_at=now,
                    deadline=deadline,
                    payload=payload,
                )
                by_queue.setdefault(r.queue_url, []).append(msg)
            records.append(FrameRecord(request_id, app, now, deadline, roots=tuple(r.module for r in routes)))
            accepted.append(FrameAccepted(request_id=request_id, deadline=deadline, modules=list(dep.roots)))
        self.results.create_frames(records)
        for url, msgs in by_queue.items():
            self.queues.send(url, msgs)
        self.metrics.put("FramesAccepted", len(frames), App=app)
        return FramesAccepted(app=app, accepted=accepted)

    def _payload(self, request_id: str, data: bytes, content_type: str) -> Payload:
        b64 = base64.b64encode(data).decode()
        if len(b64) <= self.config.inline_limit_bytes:
            return Payload(content_type=content_type, size=len(data), inline_b64=b64)
        key = f"frames/{request_id}"
        self.blobs.put(key, data, content_type)
        self.metrics.put("FramesToS3", 1)
        return Payload(content_type=content_type, size=len(data), s3_key=key)

    # -- results -----------------------------------------------------------------------------------
    def result(self, request_id: str, wait_s: float = 0.0) -> ResultOut:
        end = self.clock() + max(0.0, min(wait_s, 20.0))
        while True:
            out = self.results.get_request(request_id)
            if out is None:
                self.reject(404, "unknown_request", f"no request {request_id!r}")
            assert out is not None
            if out.status != "queued" or self.clock() >= end:
                return out
            time.sleep(0.05)
