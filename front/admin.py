"""Admin routes of the front API: app registration (``POST /v1/apps``).

They need the ``x-admin-key`` header, an admin key distinct from the frame API keys and stored the
same way (SHA-256 digest, ``adminkey#<digest>`` in the config table; ``skinflint apps admin-key``
creates one). Behind API Gateway every method also needs the usage plan's ``x-api-key``.

The body is the app spec (JSON, or YAML where PyYAML is installed). An invalid spec gets 400 with
``problems``: every reason it cannot be registered, not only the first. A valid one is stored (S3
spec file + config-table index, :class:`control.registration.store.AppRegistry`) and the planner
is asked to plan it: invoked at once when ``SKINFLINT_PLANNER_FUNCTION`` names it, else at its
next scheduled epoch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from core.adapters._aws import AWS_ERRORS
from core.adapters.config_store import ConfigStore
from core.clients import make_client
from core.schema import ErrorOut
from front.errors import RequestRejectedError

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastapi import FastAPI

    from control.service import Registrar
    from core.settings import DataPlaneConfig

__all__ = ["AdminService", "AppRegistered", "InvalidAppOut", "add_admin_routes", "admin_from_config"]

log = logging.getLogger("skinflint.front")

MAX_SPEC_BYTES = 1024 * 1024  # an app spec with inline profiles is a few KB; 1 MiB is generous
_KEY_TTL_S = 10.0


class AppRegistered(BaseModel):
    name: str
    revision: int
    sha256: str
    s3_key: str
    registered_at: float
    slo_s: float
    rate: float
    modules: list[str]
    planning: str  # "requested": the planner plans it at once or at its next epoch


class InvalidAppOut(ErrorOut):
    problems: list[str]  # every reason the spec cannot be registered


_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {
        "model": InvalidAppOut,
        "description": "invalid app spec (every problem in `problems`), or no body",
    },
    401: {"model": ErrorOut, "description": "no x-admin-key"},
    403: {"model": ErrorOut, "description": "unknown admin key"},
    409: {"model": ErrorOut, "description": "the app was registered concurrently; retry"},
    413: {"model": ErrorOut, "description": "spec larger than 1 MiB"},
    503: {"model": ErrorOut, "description": "a backend call failed; retry"},
}


@dataclass
class AdminService:
    store: ConfigStore
    registrar: Registrar
    clock: Callable[[], float]
    _keys: dict[str, float] | None = None

    def authenticate(self, key: str | None) -> None:
        if not key:
            raise RequestRejectedError(
                401, "missing_admin_key", "send the admin key in the x-admin-key header"
            )
        now = self.clock()
        cache = self._keys if self._keys is not None else {}
        self._keys = cache
        if cache.get(key, 0.0) > now:
            return
        if not self.store.admin_key_known(key):
            raise RequestRejectedError(403, "wrong_admin_key", "the admin key is not known")
        cache[key] = now + _KEY_TTL_S

    def register(self, body: bytes) -> dict[str, Any]:
        from control.spec import parse_spec_text  # cold start: the control plane loads only for registrations

        record = self.registrar.register(parse_spec_text(body, "the body"))
        return record.model_dump() | {"planning": "requested"}


def admin_from_config(config: DataPlaneConfig, clock: Callable[[], float] | None = None) -> AdminService:
    """An admin service on ``config``'s resources (boto3 clients made here, on first use)."""
    # cold start: the admin path loads the control plane (numpy, the planner) only for registrations
    from control.registration.checks import planner_settings
    from control.service import Registrar, load_catalog, profile_store, registry_and_state  # cold start
    from control.spec import profile_lookup  # cold start

    ddb, s3 = make_client("dynamodb", config, "front"), make_client("s3", config, "front")
    function = os.environ.get("SKINFLINT_PLANNER_FUNCTION")
    invoke = _planner_invoker(make_client("lambda", config, "front"), function) if function else None
    registry, states = registry_and_state(ddb, s3, config.config_table, config.bucket)
    registrar = Registrar(
        registry=registry,
        states=states,
        catalog=load_catalog(s3, config.bucket),
        stored_profile=profile_lookup(profile_store(s3, config.bucket)),
        invoke_planner=invoke,
        **planner_settings(),  # the planner's headrooms and overhead: checked as the epoch plans
    )
    return AdminService(ConfigStore(ddb, config.config_table), registrar, clock or time.time)


def _planner_invoker(client: Any, function: str) -> Callable[[str], None]:
    def invoke(app: str) -> None:
        event = {"source": "skinflint.apps", "detail-type": "AppChanged", "detail": {"app": app}}
        try:
            client.invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(event).encode())
        except AWS_ERRORS as exc:  # the next scheduled epoch plans it anyway
            log.warning("could not start the planner for %s: %s", app, exc)

    return invoke


def add_admin_routes(app: FastAPI, factory: Callable[[], AdminService]) -> None:
    """Mount the admin routes; ``factory`` is called once, on the first admin request."""
    holder: dict[str, AdminService] = {}

    def admin() -> AdminService:
        if "a" not in holder:
            holder["a"] = factory()
        return holder["a"]

    @app.post(
        "/v1/apps",
        status_code=201,
        response_model=AppRegistered,
        tags=["admin"],
        responses=_RESPONSES,
        openapi_extra={
            "requestBody": {
                "content": {"application/json": {"schema": {"type": "object"}}, "application/yaml": {}},
                "required": True,
            },
            # both keys (front/hygiene.py): API Gateway checks x-api-key, the route x-admin-key
            "security": [{"ApiKey": [], "AdminKey": []}],
        },
    )
    async def register_app(
        request: Request, x_admin_key: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        """Register an app (or a new revision of it) and ask the planner to plan it."""
        # cold start: the control plane loads only for registrations
        from control.errors import RegistrationConflictError, RegistrationError

        svc = admin()
        await run_in_threadpool(svc.authenticate, x_admin_key)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_SPEC_BYTES:
            raise RequestRejectedError(413, "too_large", f"an app spec is limited to {MAX_SPEC_BYTES} bytes")
        body = await request.body()
        if len(body) > MAX_SPEC_BYTES:
            raise RequestRejectedError(413, "too_large", f"an app spec is limited to {MAX_SPEC_BYTES} bytes")
        if not body:
            raise RequestRejectedError(400, "empty_body", "send the app spec as the body")
        try:
            out = await run_in_threadpool(svc.register, body)
        except RegistrationError as exc:
            content = {"error": "invalid_app", "reason": str(exc), "problems": exc.problems}
            return JSONResponse(status_code=400, content=content)
        except RegistrationConflictError as exc:
            return JSONResponse(status_code=409, content={"error": "conflict", "reason": str(exc)})
        return JSONResponse(status_code=201, content=out)
