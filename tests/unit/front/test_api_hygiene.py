"""API hygiene of the front: the OpenAPI document (security scheme, resolving references), Allow on
OPTIONS, the docs behind the key, security headers, wrong keys cached, no 5xx but 503."""

from __future__ import annotations

import json

import pytest

from front.hygiene import docs_mode
from tests.unit.front.fakes import client, jpeg, service

AUTH = {"x-api-key": "key-a"}


def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_every_reference_of_the_openapi_document_resolves():
    doc = client(service()).get("/openapi.json", headers=AUTH).json()
    refs = set(_refs(doc))
    assert "#/components/schemas/FrameIn" in refs  # the batch body's frames
    for ref in refs:
        node = doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]  # KeyError: a reference that does not resolve
    assert "$defs" not in json.dumps(doc)


def test_the_api_key_is_a_security_scheme_on_every_route_that_needs_it():
    doc = client(service()).get("/openapi.json", headers=AUTH).json()
    schemes = doc["components"]["securitySchemes"]
    (name,) = [
        n for n, s in schemes.items() if s == {**s, "type": "apiKey", "in": "header", "name": "x-api-key"}
    ]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            # every requirement (alternatives) of a route that needs the key names it
            required = [name in alternative for alternative in op.get("security", [])]
            assert (bool(required) and all(required)) == (path != "/healthz"), (method, path)
    assert doc["paths"]["/v1/apps"]["post"]["security"] == [{"ApiKey": [], "AdminKey": []}]


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/v1/apps", "GET, OPTIONS, POST"),  # list (GET) and register (POST) are two routes
        ("/v1/apps/traffic/frames", "OPTIONS, POST"),
        ("/v1/requests/" + "0" * 32, "GET, OPTIONS"),
        ("/healthz", "GET, OPTIONS"),
    ],
)
def test_options_names_every_method_of_the_path(path, allow):
    r = client(service()).options(path)
    assert r.status_code == 204 and r.headers["allow"] == allow


def test_options_on_an_unknown_path_is_404():
    assert client(service()).options("/nope").status_code == 404


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_the_docs_need_the_key_unless_public(path):
    keyed = client(service(), docs="key")
    assert keyed.get(path).status_code == 401
    assert keyed.get(path, headers={"x-api-key": "wrong"}).status_code == 403
    assert keyed.get(path, headers=AUTH).status_code == 200
    assert client(service(), docs="public").get(path).status_code == 200
    assert client(service(), docs="off").get(path, headers=AUTH).status_code == 404


def test_docs_mode_from_the_environment():
    assert docs_mode({}) == "key"
    assert docs_mode({"SKINFLINT_FRONT_DOCS": "PUBLIC"}) == "public"
    assert docs_mode({"SKINFLINT_FRONT_DOCS": "open-sesame"}) == "key"


def test_security_headers_on_every_answer():
    c = client(service())
    for r in (
        c.get("/healthz"),
        c.get("/v1/apps", headers=AUTH),
        c.get("/v1/apps"),  # 401
        c.post("/v1/apps/traffic/frames", content=jpeg(), headers={**AUTH, "content-type": "image/jpeg"}),
    ):
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["cache-control"] == "no-store"
        assert r.headers["x-frame-options"] == "DENY"
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert "server" not in r.headers


def test_a_wrong_key_is_read_once_then_refused_from_memory():
    svc = service()
    c = client(svc)
    for _ in range(20):
        assert c.get("/v1/apps", headers={"x-api-key": "guess"}).status_code == 403
    assert svc.store.reads == 1  # cached for 5 s
    svc.clock.now += 6
    assert c.get("/v1/apps", headers={"x-api-key": "guess"}).status_code == 403
    assert svc.store.reads == 2


def test_random_wrong_keys_cannot_grow_the_cache_without_bound():
    svc = service()
    for i in range(5_000):
        with pytest.raises(Exception, match="not known"):
            svc.authenticate(f"guess-{i}")
    assert len(svc._bad_keys) <= 4096


def test_an_unexpected_error_is_the_documented_503_not_a_500():
    svc = service()

    def broken(*_a):
        raise RuntimeError("a bug")

    svc.list_apps = broken  # type: ignore[method-assign]
    r = client(svc, raise_server_exceptions=False).get("/v1/apps", headers=AUTH)
    assert r.status_code == 503 and r.json()["error"] == "unavailable"
    assert "a bug" not in r.text and "Traceback" not in r.text
