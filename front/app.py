"""The front API's routes (FastAPI). Thin: read the HTTP request, call :class:`FrontService`,
serialise. OpenAPI at ``/docs`` (behind the key unless ``SKINFLINT_FRONT_DOCS=public``). Every
route but ``/healthz`` needs the ``x-api-key`` header."""

from __future__ import annotations

import base64
import binascii
import logging
import math
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import ValidationError

from core.adapters.usage import HttpUsage, meter
from core.errors import DataPlaneError
from core.schema import ErrorOut, FramesAccepted, FramesIn, ResultOut
from core.settings import front_api_from_env, usage_metering_from_env
from front.admin import AdminService, add_admin_routes, admin_from_config
from front.bodies import parse_json, read_capped
from front.errors import RequestRejectedError
from front.hygiene import DOCS_MODES, AllowOptions, SecurityHeaders, docs_mode, install_openapi
from front.service import FrontService

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

__all__ = ["create_app"]

log = logging.getLogger("skinflint.front")

_ERRORS: dict[int | str, dict[str, object]] = {
    **{code: {"model": ErrorOut} for code in (400, 401, 403, 404, 413, 415, 422)},
    503: {"model": ErrorOut, "description": "a backend call failed (Retry-After)"},
}
_READ_LIMITED: dict[str, object] = {
    "model": ErrorOut,
    "description": "per-key read rate (rate_limited) or too many long polls open (too_many_waiters), "
    "with Retry-After",
}
_SHED: dict[int | str, dict[str, object]] = {
    429: {"model": ErrorOut, "description": "per-key rate limit (Retry-After)"},
    503: {
        "model": ErrorOut,
        "description": "shed: the plan cannot meet the deadline now (Retry-After); a backend call failed "
        "(Retry-After); or batch_too_large: more frames than the plan can ever take in one request "
        "(max_frames, no Retry-After)",
    },
}


#: the OpenAPI document declares it (components.securitySchemes) on every route that needs it, so a
#: client generated from the document sends it
API_KEY = APIKeyHeader(
    name="x-api-key", scheme_name="ApiKey", auto_error=False, description="the API key of the front"
)


async def _authed(
    request: Request, x_api_key: Annotated[str | None, Security(API_KEY)] = None
) -> FrontService:
    svc: FrontService = request.app.state.service()
    if not svc.key_trusted(x_api_key):  # a read of the config table: on a thread
        await run_in_threadpool(svc.authenticate, x_api_key)
    request.state.api_key = x_api_key
    return svc


Svc = Annotated[FrontService, Depends(_authed)]


def _warming(service: Callable[[], FrontService]) -> Callable[[FastAPI], Any]:
    """A lifespan that warms the service (:meth:`FrontService.warm`) before the app serves."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        warmed = service().warm()
        log.info("warmed: %s", ", ".join(warmed) or "no app deployed yet")
        yield

    return lifespan


def create_app(
    service_factory: Callable[[], FrontService],
    admin_factory: Callable[[], AdminService] | None = None,
    warm: bool = False,
    docs: str | None = None,
) -> FastAPI:
    """``service_factory`` is called once, on the first request that needs it (lean cold start);
    ``admin_factory`` likewise for the admin routes (default: built from the front's config).
    ``warm``: build the service at startup and warm every deployed app's path
    (:meth:`FrontService.warm`) before serving (a long-running front; the Lambda stays lazy).
    ``docs``: ``/docs``, ``/redoc`` and ``/openapi.json`` behind the API key (``key``), open
    (``public``) or absent (``off``); default ``SKINFLINT_FRONT_DOCS``, else ``key``."""
    holder: dict[str, FrontService] = {}

    def service() -> FrontService:
        if "svc" not in holder:
            holder["svc"] = service_factory()
        return holder["svc"]

    mode = docs if docs in DOCS_MODES else docs_mode()
    app = FastAPI(
        title="Skinflint front API",
        version="1",
        description="Send video frames to a deployed app; read each frame's results.",
        lifespan=_warming(service) if warm else None,
        docs_url="/docs" if mode == "public" else None,
        redoc_url="/redoc" if mode == "public" else None,
        openapi_url="/openapi.json" if mode == "public" else None,
    )
    install_openapi(app, mode, Depends(_authed))
    app.add_middleware(AllowOptions, routes=lambda: app.routes)
    app.add_middleware(SecurityHeaders)

    app.state.service = service
    app.state.service_holder = holder
    _meter_requests(app)

    @app.exception_handler(RequestRejectedError)
    async def _rejected(_: Request, exc: RequestRejectedError) -> JSONResponse:
        content: dict[str, object] = {"error": exc.error, "reason": exc.reason, **exc.details}
        headers = None
        if exc.retry_after_s is not None:
            content["retry_after_s"] = round(exc.retry_after_s, 3)
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
        return JSONResponse(status_code=exc.status, content=content, headers=headers)

    @app.exception_handler(DataPlaneError)
    async def _unavailable(_: Request, exc: DataPlaneError) -> JSONResponse:
        # a backend call failed (DynamoDB, SQS, S3): retryable, never a bare 500
        log.warning("backend call failed: %s", exc)
        return JSONResponse(
            status_code=503,
            content={"error": "unavailable", "reason": "a backend call failed; retry", "retry_after_s": 1},
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # a bug: logged with its traceback; the client gets the one documented 5xx, never a trace
        log.error("unexpected error: %r", exc, exc_info=exc)
        return JSONResponse(
            status_code=503,
            content={
                "error": "unavailable",
                "reason": "the front could not answer; retry",
                "retry_after_s": 1,
            },
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        service().metrics.put("FrontRejected", 1, Reason="invalid_request")
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse(
            status_code=422,
            content={"error": "invalid_request", "reason": f"{where}: {first.get('msg', '')}"},
        )

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, bool]:  # on the event loop: no thread, however busy the pool
        return {"ok": True}

    @app.get("/v1/apps", tags=["apps"], responses={**_ERRORS, 429: _READ_LIMITED})
    def list_apps(request: Request, svc: Svc) -> dict[str, list[dict[str, object]]]:
        svc.take_read(getattr(request.state, "api_key", None))
        return {"apps": svc.list_apps()}

    @app.post(
        "/v1/apps/{app_name}/frames",
        status_code=202,
        response_model=FramesAccepted,
        tags=["frames"],
        responses={**_ERRORS, **_SHED},
        openapi_extra={
            "requestBody": {
                "content": {
                    "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
                    "image/png": {"schema": {"type": "string", "format": "binary"}},
                    "application/json": {"schema": FramesIn.model_json_schema()},
                },
                "required": True,
            }
        },
    )
    async def post_frames(app_name: str, request: Request, svc: Svc) -> FramesAccepted:
        """One JPEG/PNG frame as the body, or up to 10 as JSON ``{"frames": [{"image_b64": ...}]}``.
        Returns 202 with each frame's request id and deadline."""
        svc.router(app_name)  # 404 before reading a body for an unknown app
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > svc.config.max_body_bytes:
            svc.reject(413, "too_large", f"body of {declared} bytes exceeds {svc.config.max_body_bytes}")
        try:  # streamed under the cap: a chunked body is never buffered past it
            body = await read_capped(request.stream(), svc.config.max_body_bytes)
        except RequestRejectedError as rej:
            svc.reject(rej.status, rej.error, rej.reason)
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        frames = _frames_from_json(svc, body) if ctype == "application/json" else [(body, ctype)]
        if ctype != "application/json" and not body:
            svc.reject(400, "empty_body", "the body is empty")
        return await run_in_threadpool(svc.accept, app_name, frames, getattr(request.state, "api_key", None))

    @app.get(
        "/v1/requests/{request_id}",
        response_model=ResultOut,
        tags=["results"],
        responses={
            **_ERRORS,
            409: {
                "model": ErrorOut,
                "description": "results_pushed: the frame's app pushes its results to its results queue "
                "(named in the reason; read it with `skinflint results APP`), none are kept to read here",
            },
            429: {"model": ErrorOut, "description": "too many long polls open (Retry-After)"},
        },
    )
    async def get_request(
        request_id: str, request: Request, svc: Svc, wait: Annotated[float, Query(ge=0, le=20)] = 0.0
    ) -> ResultOut:
        """The frame's status and, once done, every module's result. ``?wait=S`` long-polls up to
        S s (no thread is held while waiting; a key may hold a few dozen such polls per front). A
        frame of an app whose results are pushed (its spec's ``"results": "push"``) answers 409
        ``results_pushed`` naming its results queue."""
        return await svc.wait_result(request_id, wait, getattr(request.state, "api_key", None))

    add_admin_routes(app, admin_factory or (lambda: admin_from_config(service().config)))
    return app


def _meter_requests(app: FastAPI) -> None:
    """Count every HTTP request as the deployed front is billed for it (API Gateway request, Lambda
    invocation and milliseconds: core/adapters/usage.py), unless SKINFLINT_USAGE_METERING is off
    (malformed: off here, and the service's configuration names the setting in its 503)."""
    try:
        on = usage_metering_from_env()
    except ValueError:
        on = False
    if on:
        app.add_middleware(HttpUsage, meter=meter("front"), api=front_api_from_env())


def _frames_from_json(svc: FrontService, body: bytes) -> list[tuple[bytes, str]]:
    try:
        parsed = FramesIn.model_validate(parse_json(body))
    except RequestRejectedError as rej:
        svc.reject(rej.status, rej.error, rej.reason)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        svc.reject(400, "malformed_json", f"{where}: {first['msg']}")
        raise
    out: list[tuple[bytes, str]] = []
    for i, frame in enumerate(parsed.frames):
        try:
            out.append((base64.b64decode(frame.image_b64, validate=True), frame.content_type))
        except (binascii.Error, ValueError):
            svc.reject(400, "malformed_json", f"frames.{i}.image_b64 is not base64")
    return out
