"""What every HTTP answer of the front carries, apart from the routes' logic: standard security
headers, a correct ``Allow`` for ``OPTIONS``, an OpenAPI document whose every reference resolves,
and the documentation routes behind the API key unless ``SKINFLINT_FRONT_DOCS`` says otherwise."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping

    from fastapi import FastAPI

__all__ = ["DOCS_MODES", "AllowOptions", "SecurityHeaders", "docs_mode", "hoist_defs", "install_openapi"]

log = logging.getLogger("skinflint.front")

DOCS_MODES = ("key", "public", "off")  # SKINFLINT_FRONT_DOCS: behind x-api-key (default), open, none
#: schemes routes name in their own ``security`` (openapi_extra) rather than through a dependency
SECURITY_SCHEMES = {
    "ApiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "the API key of the front",
    },
    "AdminKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-admin-key",
        "description": "an admin key (app registration), with the API key behind API Gateway",
    },
}
_DOC_PATHS = ("/docs", "/redoc", "/openapi.json")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Any
Send = Any

_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"strict-transport-security", b"max-age=31536000; includeSubDomains"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
_API_ONLY = [(b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'")]  # not the HTML docs


def docs_mode(env: MutableMapping[str, str] | None = None) -> str:
    """``SKINFLINT_FRONT_DOCS``: ``key`` (default: the docs need x-api-key, as every API route),
    ``public`` (a local stack's browser), ``off``; anything else is ``key`` (and logged)."""
    raw = (os.environ if env is None else env).get("SKINFLINT_FRONT_DOCS", "").strip().lower() or "key"
    if raw not in DOCS_MODES:
        log.warning("SKINFLINT_FRONT_DOCS=%r is not one of %s: the docs stay behind the key", raw, DOCS_MODES)
        return "key"
    return raw


class SecurityHeaders:
    """ASGI middleware: the standard security headers on every answer, ``Cache-Control: no-store``
    unless the route set its own (results and errors must not be cached by a shared proxy)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        is_doc = scope.get("path", "") in ("/docs", "/redoc")

        async def with_headers(message: Message) -> None:
            if message.get("type") == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                extra = _HEADERS if is_doc else _HEADERS + _API_ONLY
                headers += [(n, v) for n, v in extra if n not in names]
                if b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class AllowOptions:
    """ASGI middleware: ``OPTIONS`` on a path answers 204 with every method the path's routes take
    in ``Allow`` (Starlette's 405 names only the first matching route's methods: ``GET`` for
    ``/v1/apps``, which also takes ``POST``); a path no route takes goes on (404)."""

    def __init__(self, app: Any, routes: Callable[[], list[Any]]):
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "OPTIONS":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        allowed: set[str] = set()
        for route in self.routes():
            regex, methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
            if regex is not None and methods and regex.match(path):
                allowed |= set(methods)
        if not allowed:
            await self.app(scope, receive, send)
            return
        allow = ", ".join(sorted(allowed | {"OPTIONS"}))
        await send({"type": "http.response.start", "status": 204, "headers": [(b"allow", allow.encode())]})
        await send({"type": "http.response.body", "body": b""})


def hoist_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """Move every JSON Schema ``$defs`` found in the document (pydantic's, in a hand-written
    request body) to ``components.schemas`` and point their ``#/$defs/X`` references there: in an
    OpenAPI document ``#/$defs/...`` resolves against the document root, where nothing is."""
    found: dict[str, Any] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            defs = node.pop("$defs", None)
            if isinstance(defs, dict):
                found.update(walk(defs))
            out = {k: walk(v) for k, v in node.items()}
            ref = out.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                out["$ref"] = "#/components/schemas/" + ref.removeprefix("#/$defs/")
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(schema)
    schemas = out.setdefault("components", {}).setdefault("schemas", {})
    for name, sub in found.items():
        schemas.setdefault(name, sub)
    return out


def install_openapi(app: FastAPI, mode: str, authed: Any) -> None:
    """The OpenAPI document with its references resolved (:func:`hoist_defs`), and the docs routes
    by ``mode``: ``public`` as FastAPI serves them, ``key`` behind ``authed`` (the routes'
    key dependency), ``off`` none."""

    def openapi() -> dict[str, Any]:
        doc: dict[str, Any] | None = app.openapi_schema
        if doc is None:
            doc = app.openapi_schema = hoist_defs(
                get_openapi(
                    title=app.title, version=app.version, description=app.description, routes=app.routes
                )
            )
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
    if mode != "key":
        return  # "public": FastAPI's own routes (create_app keeps them); "off": none

    async def openapi_json(_: Any = authed) -> JSONResponse:
        return JSONResponse(openapi())

    async def swagger(_: Any = authed) -> Any:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")

    async def redoc(_: Any = authed) -> Any:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")

    for path, endpoint in zip(_DOC_PATHS, (swagger, redoc, openapi_json), strict=True):
        app.add_api_route(path, endpoint, methods=["GET"], include_in_schema=False)
