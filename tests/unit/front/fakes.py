"""In-memory fakes of the front's adapters, so the FastAPI app runs in process with no AWS at all."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi.testclient import TestClient

from core.adapters.metrics import MemoryMetrics
from core.schema import ResultOut
from core.settings import DataPlaneConfig
from front.admission import Admission, AdmissionConfig
from front.app import create_app
from front.service import FrontService
from tests.unit.front.test_admission import ORIGIN, deployment

if TYPE_CHECKING:
    from core.adapters.results import FrameRecord
    from core.schema import Deployment, TaskMessage

KEYS = ("key-a", "key-b")


def jpeg(width: int = 32, height: int = 24) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(buf, format="JPEG")
    return buf.getvalue()


class FakeKeys:
    def __init__(self, keys: tuple[str, ...] = KEYS):
        self.keys = set(keys)
        self.reads = 0

    def api_key_known(self, key: str) -> bool:
        self.reads += 1
        return key in self.keys


@dataclass
class FakeResults:
    frames: dict[str, ResultOut] = field(default_factory=dict)
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def create_frames(self, records: list[FrameRecord]) -> None:
        for r in records:
            self.frames[r.request_id] = ResultOut(
                request_id=r.request_id,
                app=r.app,
                status="queued",
                accepted_at=r.accepted_at,
                deadline=r.deadline,
            )

    def get_request(self, request_id: str) -> ResultOut | None:
        with self.lock:
            self.reads += 1
        return self.frames.get(request_id)

    def get_post_requests(self, request_id: str) -> dict[str, ResultOut] | None:
        """Every frame of the request's POST (its first 30 digits), one read."""
        with self.lock:
            self.reads += 1
        if request_id not in self.frames:
            return None
        return {rid: out for rid, out in self.frames.items() if rid[:30] == request_id[:30]}


@dataclass
class FakeQueues:
    sent: dict[str, list[TaskMessage]] = field(default_factory=dict)

    def send_many(self, by_queue: dict[str, list[TaskMessage]]) -> None:
        for url, msgs in by_queue.items():
            self.sent.setdefault(url, []).extend(msgs)

    def depth(self, _url: str) -> int:
        return 0


class FakeBlobs:
    def put(self, *_a: Any) -> None:
        pass


@dataclass
class FakeManifest:
    apps: dict[str, Any]
    version: int = 1

    def serving(self, _now: float) -> int:
        return self.version


class FakePlans:
    def __init__(self, dep: Deployment):
        self.dep = dep

    def current(self) -> FakeManifest:
        return FakeManifest({self.dep.app: {}}, self.dep.version)

    def current_hinted(self) -> FakeManifest:
        return self.current()

    def deployment(self, version: int, app: str) -> Deployment | None:
        return self.dep if (version, app) == (self.dep.version, self.dep.app) else None


class Clock:
    def __init__(self, now: float = ORIGIN):
        self.now = now

    def __call__(self) -> float:
        return self.now


def service(
    dep: Deployment | None = None,
    admission: AdmissionConfig | None = None,
    clock: Clock | None = None,
    **kw: Any,
) -> FrontService:
    return FrontService(
        config=DataPlaneConfig(),
        store=FakeKeys(),  # type: ignore[arg-type]
        results=FakeResults(),  # type: ignore[arg-type]
        queues=FakeQueues(),  # type: ignore[arg-type]
        blobs=FakeBlobs(),  # type: ignore[arg-type]
        metrics=MemoryMetrics(),
        plans=FakePlans(dep or deployment()),  # type: ignore[arg-type]
        clock=clock or Clock(),
        admission=Admission(admission) if admission is not None else None,
        **kw,
    )


def client(svc: FrontService, raise_server_exceptions: bool = True, **kw: Any) -> TestClient:
    return TestClient(create_app(lambda: svc, **kw), raise_server_exceptions=raise_server_exceptions)
