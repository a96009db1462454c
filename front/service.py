"""The front's logic, free of HTTP: authenticate, validate frames, dispatch them (TC time windows)
and enqueue; read results. Adapters are injected; the FastAPI routes only translate."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from core.adapters.results import FrameRecord
from core.ids import MAX_FRAMES_PER_POST, new_post_id
from core.ids import request_id as frame_request_id
from core.logs import append_keys
from core.routing import Router
from core.schema import FrameAccepted, FramesAccepted, Payload, ResultOut, TaskMessage
from front.admission import Shed
from front.errors import RequestRejectedError
from front.images import IMAGE_TYPES, LimitsConfig, check_image
from front.limiters import TokenBucket

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from core.adapters.blobs import BlobStore
    from core.adapters.config_store import ConfigStore
    from core.adapters.metrics import Metrics
    from core.adapters.plan_store import Manifest, PlanStore
    from core.adapters.queues import TaskQueues
    from core.adapters.results import ResultStore
    from core.routing import Route
    from core.settings import DataPlaneConfig
    from front.admission import Admission

__all__ = ["FrontService"]

MAX_WAIT_S = 20.0  # s: the longest long poll (?wait)
_POLL_FIRST_S = 0.1  # s between the first two reads of a long poll
_POLL_MAX_S = 1.0  # s between two reads at most
_KEY_TTL_S = 10.0  # s an API key found known is trusted without reading it again
_BAD_KEY_TTL_S = 5.0  # s an API key found unknown is refused without reading it again
_BAD_KEYS_KEPT = 4096  # unknown keys remembered at most
_POINTER_TTL_S = 1.0  # s: the plan pointer is re-read this often (a version activates >= 1 s after publish)
# finished results (done or dropped: final) of a POST's other frames, kept from the Query that read
# one of them, so the GETs of a POST's frames that finished together cost one Query, not one each
_FINISHED_TTL_S = 10.0
_FINISHED_KEPT = 4096
# a POST's id and the frame's index (core/ids.py): anything else cannot exist (and never hits DynamoDB)
_REQUEST_ID = re.compile(r"[0-9a-f]{32}")
_APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


log = logging.getLogger("skinflint.front")


@dataclass
class FrontService:
    config: DataPlaneConfig
    store: ConfigStore
    results: ResultStore
    queues: TaskQueues
    blobs: BlobStore
    metrics: Metrics
    plans: PlanStore  # versioned plans: dispatch on the version serving now (docs/control.md)
    clock: Callable[[], float] = time.time
    admission: Admission | None = None  # load shedding (front/admission.py); None: admit all
    image_limits: LimitsConfig = field(default_factory=LimitsConfig)  # per app (front/images.py)
    max_waiters_per_key: int = 32  # open long polls (?wait) per API key on this instance; then 429
    # GETs (results, apps) per API key and s on this instance (0: no limit, the default: the load
    # test's result collection reads hundreds a second with one key; API Gateway's usage plan
    # throttles every method per key in a deployment)
    read_rate_per_s: float = 0.0
    read_burst: float = 100.0
    _keys: dict[str, float] = field(default_factory=dict)
    _bad_keys: dict[str, float] = field(default_factory=dict)  # unknown key -> refused until
    _pointer: tuple[float, Manifest | None] = (0.0, None)
    _by_version: dict[tuple[str, int], Router] = field(default_factory=dict)
    # (app, version) -> its results queue when it pushes its results, else None (versions are immutable)
    _pushes: dict[tuple[str, int], str | None] = field(default_factory=dict)
    _io: list[ThreadPoolExecutor] = field(default_factory=list)  # started on first use
    _io_lock: threading.Lock = field(default_factory=threading.Lock)
    _waiters: dict[str, int] = field(default_factory=dict)  # API key -> its open long polls
    _reads: dict[str, TokenBucket] = field(default_factory=dict)  # API key -> its GET bucket
    # request id -> (kept until, its finished result), read with a sibling frame (_read_result)
    _finished: dict[str, tuple[float, ResultOut]] = field(default_factory=dict)

    def _io_pool(self) -> ThreadPoolExecutor:
        with self._io_lock:
            if not self._io:
                self._io.append(ThreadPoolExecutor(max_workers=4, thread_name_prefix="front-io"))
            return self._io[0]

    # -- auth and config ---------------------------------------------------------------------------
    def key_trusted(self, key: str | None) -> bool:
        """The key was found known within ``_KEY_TTL_S``: :meth:`authenticate` would not read it."""
        return bool(key) and self._keys.get(key or "", 0.0) > self.clock()

    def authenticate(self, key: str | None) -> None:
        """401 without a key, 403 for an unknown one. A known key is trusted for ``_KEY_TTL_S``, an
        unknown one refused for ``_BAD_KEY_TTL_S`` without reading it again (a client retrying a
        wrong key, or sending random ones, costs no DynamoDB read per request)."""
        if not key:
            self.reject(401, "missing_api_key", "send the API key in the x-api-key header")
        now = self.clock()
        if self._keys.get(key, 0.0) > now:
            return
        if self._bad_keys.get(key, 0.0) > now:
            self.reject(403, "wrong_api_key", "the API key is not known")
        if not self.store.api_key_known(key):
            with self._io_lock:
                if len(self._bad_keys) >= _BAD_KEYS_KEPT:  # bounded: random keys cannot grow it
                    for stale in [k for k, until in self._bad_keys.items() if until <= now] or list(
                        self._bad_keys
                    ):
                        del self._bad_keys[stale]
                self._bad_keys[key] = now + _BAD_KEY_TTL_S
            self.reject(403, "wrong_api_key", "the API key is not known")
        self._bad_keys.pop(key, None)
        self._keys[key] = now + _KEY_TTL_S

    def router(self, app: str) -> Router:
        if not _APP_NAME.fullmatch(app):
            self.reject(404, "unknown_app", f"no app named {app[:140]!r} is deployed")
        now = self.clock()
        manifest = self._manifest(now)
        if manifest is None:  # no plan published yet: nothing is deployed
            self.reject(404, "unknown_app", f"no app named {app!r} is deployed")
        return self._versioned_router(app, manifest.serving(now))

    def _manifest(self, now: float) -> Manifest | None:
        """The plan pointer's manifest, checked at most once per ``_POINTER_TTL_S`` through one of its
        hints (``PlanStore.current_hinted``: one small read, the pointer itself only on a change)."""
        if self._pointer[0] <= now:
            self._pointer = (now + _POINTER_TTL_S, self.plans.current_hinted())
        return self._pointer[1]

    def _versioned_router(self, app: str, version: int) -> Router:
        """The router of ``app`` in plan ``version`` (versions are immutable: cached for good; the
        pointer, re-read every ``_POINTER_TTL_S``, says which version serves: the previous one
        until the current one's ``activate_at``)."""
        key = (app, version)
        router = self._by_version.get(key)
        if router is None:
            dep = self.plans.deployment(version, app)
            if dep is None:
                self.reject(404, "unknown_app", f"no app named {app!r} is deployed")
            assert dep is not None
            router = self._by_version[key] = Router.for_deployment(dep)
            for old in sorted(self._by_version, key=lambda cached: cached[1])[
                : max(0, len(self._by_version) - 64)
            ]:
                self._by_version.pop(old, None)
        return router

    def warm(self) -> list[str]:
        """Do now what the first frame of each deployed app would otherwise pay for: read the plan
        pointer, build each app's router (dispatch schedules) and admission state, and open the
        DynamoDB and SQS connections (a read of each app's root queue depth and of a missing
        result). Returns the apps warmed. Best effort: a failed read leaves the rest lazy."""
        warmed: list[str] = []
        try:
            for info in self.list_apps():
                router = self.router(str(info["name"]))
                if self.admission is not None:
                    self.admission.prepare(router)
                for module in router.deployment.roots:
                    for url in router.deployment.queues.get(module, {}).values():
                        self.queues.depth(url)
                warmed.append(str(info["name"]))
            self.results.warm()
        except Exception as exc:  # noqa: BLE001 - best effort: what is not warm stays lazy
            log.warning("warm-up stopped early: %s", exc)
        return warmed

    def take_read(self, api_key: str | None) -> None:
        """A GET of ``api_key``: 429 ``rate_limited`` past ``read_rate_per_s`` (burst ``read_burst``).
        Only authenticated keys get here, so the buckets are as many as the known keys in use."""
        if self.read_rate_per_s <= 0 or not api_key:
            return
        now = self.clock()
        with self._io_lock:
            bucket = self._reads.get(api_key)
            if bucket is None:
                bucket = self._reads[api_key] = TokenBucket(self.read_rate_per_s, self.read_burst, now)
            wait = bucket.take(1, now)
        if wait > 0:
            self.metrics.put("FrontRejected", 1, Reason="rate_limited")
            raise RequestRejectedError(
                429,
                "rate_limited",
                f"this API key is limited to {self.read_rate_per_s:g} reads/s (burst {self.read_burst:g})",
                wait,
            )

    def list_apps(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        manifest = self._manifest(self.clock())
        for name in sorted(manifest.apps) if manifest is not None else []:
            deployment = self.router(name).deployment
            out.append(
                {
                    "name": name,
                    "slo_s": deployment.slo_s,
                    # the SLO the plan was made for (less the app's admission_reserve, docs/control.md)
                    "planning_slo_s": deployment.planning_slo_s or deployment.slo_s,
                    "frame_rate": deployment.frame_rate,
                    "roots": deployment.roots,
                    "modules": list(deployment.plan.modules),
                    "emulated_hardware": deployment.emulated_hardware,
                    # where its results go: "pull" (GET /v1/requests/{id}) or "push" (its results
                    # queue, named; docs/dataplane.md "Results: pull or push")
                    "results": deployment.results,
                    **(
                        {"results_queue": deployment.results_queue.rsplit("/", 1)[-1]}
                        if deployment.results_queue
                        else {}
                    ),
                }
            )
        return out

    def reject(self, status: int, error: str, reason: str) -> NoReturn:
        self.metrics.put("FrontRejected", 1, Reason=error)
        raise RequestRejectedError(status, error, reason)

    # -- frames ------------------------------------------------------------------------------------
    def accept(self, app: str, frames: list[tuple[bytes, str]], api_key: str | None = None) -> FramesAccepted:
        """Validate every frame first (all or nothing), admit them (load shedding), then store,
        record and enqueue them. The POST gets one post id; its frame ``i`` the request id
        ``post id + f"{i:02x}"`` (core/ids.py): all frames of a POST share one results partition."""
        router = self.router(app)
        if len(frames) > MAX_FRAMES_PER_POST:  # the JSON form's limit (FramesIn): one request id digit pair
            self.reject(
                400, "malformed_json", f"{len(frames)} frames: a POST holds at most {MAX_FRAMES_PER_POST}"
            )
        limits = self.image_limits.for_app(app)
        for data, content_type in frames:
            if content_type not in IMAGE_TYPES:
                self.reject(415, "unsupported_media_type", f"{content_type!r} is not image/jpeg or image/png")
            if len(data) > self.config.max_body_bytes:
                self.reject(
                    413, "too_large", f"a frame is {len(data)} bytes, limit {self.config.max_body_bytes}"
                )
            try:
                check_image(data, content_type, limits)
            except RequestRejectedError as rej:
                self.reject(rej.status, rej.error, rej.reason)
        now = self.clock()
        dep = router.deployment
        admitted = self._admit(router, app, len(frames), now, api_key)
        records: list[FrameRecord] = []
        by_queue: dict[str, list[TaskMessage]] = {}
        accepted: list[FrameAccepted] = []
        deadline = now + dep.slo_s
        post = new_post_id(deadline)  # the minute its frames fall due: where its item is kept
        for i, (data, content_type) in enumerate(frames):
            request_id = frame_request_id(post, i)
            append_keys(request_id=request_id)  # the correlation id of the logs from here on
            payload = self._payload(request_id, data, content_type)
            t0 = time.perf_counter()
            routes: list[Route] = (
                [admitted[i][module] for module in dep.roots]
                if admitted
                else [router.route(module, now) for module in dep.roots]
            )
            self.metrics.put("DispatchMs", (time.perf_counter() - t0) * 1e3, "Milliseconds", App=app)
            for route in routes:
                msg = router.task(
                    route,
                    request_id=request_id,
                    task_id=route.module,
                    accepted_at=now,
                    enqueued_at=now,
                    deadline=deadline,
                    payload=payload,
                )
                by_queue.setdefault(route.queue_url, []).append(msg)
            records.append(
                FrameRecord(request_id, app, now, deadline, roots=tuple(route.module for route in routes))
            )
            accepted.append(FrameAccepted(request_id=request_id, deadline=deadline, modules=list(dep.roots)))
        # the frame items and the root messages in parallel: the root modules' latency counts from
        # `now`, so their messages do not wait for the write. A frame is accepted (202) only when
        # both succeeded; after a failure of either (503) what the other wrote stays unreferenced
        # (the caller never got the ids: no frame of it is answered or awaited)
        write = self._io_pool().submit(self.results.create_frames, records)
        try:
            self.queues.send_many(by_queue)
        finally:
            write.result()
        self.metrics.put("FramesAccepted", len(frames), App=app)
        return FramesAccepted(app=app, accepted=accepted)

    def _admit(
        self, router: Router, app: str, n_frames: int, now: float, api_key: str | None
    ) -> list[dict[str, Route]] | None:
        """Per frame, its root routes (None without admission control); sheds with 429/503."""
        if self.admission is None:
            return None
        t0 = time.perf_counter()
        decision = self.admission.admit(router, n_frames, now, api_key, depth=self.queues.depth)
        self.metrics.put("AdmissionMs", (time.perf_counter() - t0) * 1e3, "Milliseconds", App=app)
        if isinstance(decision, Shed):
            self.metrics.put("FrontRejected", n_frames, App=app, Reason=decision.error)
            details: dict[str, object] | None = (
                {"max_frames": decision.max_frames} if decision.max_frames is not None else None
            )
            raise RequestRejectedError(
                decision.status, decision.error, decision.reason, decision.retry_after_s, details
            )
        if decision.spilled:
            self.metrics.put("SlotSpills", decision.spilled, App=app)
        if decision.shared_errors:
            self.metrics.put("SlotCounterErrors", decision.shared_errors, App=app)
        return decision.routes

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
        """The request's result; with ``wait_s``, blocking this thread until it is done or the
        wait is over (the HTTP route uses :meth:`wait_result`, which holds no thread)."""
        self._check_request_id(request_id)
        end = time.monotonic() + max(0.0, min(wait_s, MAX_WAIT_S))
        for delay in _poll_delays():
            out = self._read_result(request_id)
            left = end - time.monotonic()
            if out.status != "queued" or left <= 0:
                return out
            time.sleep(min(delay, left))
        raise AssertionError("unreachable")  # pragma: no cover - _poll_delays is endless

    async def wait_result(self, request_id: str, wait_s: float, api_key: str | None = None) -> ResultOut:
        """The request's result, long-polled up to ``wait_s`` without holding a thread: the reads
        run on the default executor, the waits between them are ``asyncio.sleep`` with a backoff
        (:func:`_poll_delays`: at most about one read a second after the first few). A key may have
        ``max_waiters_per_key`` long polls open on this instance; beyond, 429 ``too_many_waiters``."""
        self._check_request_id(request_id)
        self.take_read(api_key)
        wait_s = max(0.0, min(wait_s, MAX_WAIT_S))
        if wait_s <= 0:
            return await asyncio.to_thread(self._read_result, request_id)
        who = api_key or ""
        with self._io_lock:
            if self._waiters.get(who, 0) >= self.max_waiters_per_key:
                over = True
            else:
                over = False
                self._waiters[who] = self._waiters.get(who, 0) + 1
        if over:
            self.metrics.put("FrontRejected", 1, Reason="too_many_waiters")
            raise RequestRejectedError(
                429,
                "too_many_waiters",
                f"this API key has {self.max_waiters_per_key} long polls open here; wait for one to end "
                "or poll without ?wait",
                1.0,
            )
        try:
            end = time.monotonic() + wait_s
            for delay in _poll_delays():
                out = await asyncio.to_thread(self._read_result, request_id)
                left = end - time.monotonic()
                if out.status != "queued" or left <= 0:
                    return out
                await asyncio.sleep(min(delay, left))
            raise AssertionError("unreachable")  # pragma: no cover - _poll_delays is endless
        finally:
            with self._io_lock:
                self._waiters[who] -= 1
                if not self._waiters[who]:
                    del self._waiters[who]

    def _read_finished(self, request_id: str) -> ResultOut | None:
        """The frame's result: kept from a read of its POST's partition if it was finished then (a
        finished frame's result is final: every task of it recorded, or dropped with a reason;
        kept ``_FINISHED_TTL_S``), else one Query of the partition, whose finished frames are kept
        for their own GETs. None: no such frame."""
        now = time.monotonic()
        with self._io_lock:
            kept = self._finished.pop(request_id, None)
        if kept is not None and kept[0] > now:
            return kept[1]
        frames = self.results.get_post_requests(request_id)
        if frames is None:
            return None
        with self._io_lock:
            if len(self._finished) + len(frames) > _FINISHED_KEPT:  # bounded: the expired, else all
                for stale in [rid for rid, (until, _) in self._finished.items() if until <= now] or list(
                    self._finished
                ):
                    del self._finished[stale]
            for rid, result in frames.items():
                if rid != request_id and result.status != "queued":
                    self._finished[rid] = (now + _FINISHED_TTL_S, result)
        return frames[request_id]

    def _check_request_id(self, request_id: str) -> None:
        append_keys(request_id=request_id[:140])
        if not _REQUEST_ID.fullmatch(request_id):
            self.reject(404, "unknown_request", f"no request {request_id[:140]!r}")

    def _read_result(self, request_id: str) -> ResultOut:
        out = self._read_finished(request_id)
        if out is None:
            self.reject(404, "unknown_request", f"no request {request_id!r}")
        queue = self._pushed_to(out.app)
        if queue is not None:
            name = queue.rsplit("/", 1)[-1]
            self.reject(
                409,
                "results_pushed",
                f"app {out.app!r} pushes its results to its results queue {name} "
                f"(`skinflint results {out.app}` reads it); none are kept to read here",
            )
        return out

    def _pushed_to(self, app: str) -> str | None:
        """The results queue of ``app`` when its deployment in service pushes its results; None for a
        pull app (or one no longer deployed: its records, if any, are in the table)."""
        if not _APP_NAME.fullmatch(app):
            return None
        now = self.clock()
        manifest = self._manifest(now)
        if manifest is None:
            return None
        key = (app, manifest.serving(now))
        if key not in self._pushes:
            router = self._by_version.get(key)
            dep = router.deployment if router is not None else self.plans.deployment(key[1], app)
            if len(self._pushes) >= 256:
                self._pushes.clear()
            self._pushes[key] = dep.results_queue if dep is not None and dep.results == "push" else None
        return self._pushes[key]


def _poll_delays() -> Iterator[float]:
    """s between two reads of a long poll: 0.1 s, growing by half each time up to 1 s (a result
    done soon is seen soon; a long wait costs about one DynamoDB read a second)."""
    delay = _POLL_FIRST_S
    while True:
        yield delay
        delay = min(delay * 1.5, _POLL_MAX_S)
