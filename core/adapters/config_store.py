"""The config table's keys: hashed API and admin keys. One string key ``pk``; the value is a JSON
document in ``doc``. The same table holds the versioned plans (``core.adapters.plan_store``), the
control state and the app registry, each read and written by its own adapter."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core.adapters._aws import AWS_ERRORS
from core.errors import ConfigError

__all__ = ["ConfigStore", "hash_api_key"]


def hash_api_key(key: str) -> str:
    """SHA-256 hex digest of an API key: only this is stored."""
    return hashlib.sha256(key.encode()).hexdigest()


class ConfigStore:
    """The API and admin keys of the config table ``table`` (only their SHA-256 is stored)."""

    def __init__(self, client: Any, table: str):
        self._ddb = client
        self._table = table

    # -- raw documents -------------------------------------------------------------------------
    def _put(self, pk: str, doc: str) -> None:
        try:
            self._ddb.put_item(TableName=self._table, Item={"pk": {"S": pk}, "doc": {"S": doc}})
        except AWS_ERRORS as exc:
            raise ConfigError(f"cannot write {pk}: {exc}", key=pk) from exc

    def _get(self, pk: str) -> str | None:
        try:
            item = self._ddb.get_item(TableName=self._table, Key={"pk": {"S": pk}}).get("Item")
        except AWS_ERRORS as exc:
            raise ConfigError(f"cannot read {pk}: {exc}", key=pk) from exc
        return item["doc"]["S"] if item else None

    # -- API keys ---------------------------------------------------------------------------------
    def put_api_key(self, key: str, name: str) -> None:
        self._put(f"apikey#{hash_api_key(key)}", json.dumps({"name": name}))

    def api_key_known(self, key: str) -> bool:
        return self._get(f"apikey#{hash_api_key(key)}") is not None

    # -- admin keys (app registration; distinct from the frame API keys) --------------------------
    def put_admin_key(self, key: str, name: str) -> None:
        self._put(f"adminkey#{hash_api_key(key)}", json.dumps({"name": name}))

    def admin_key_known(self, key: str) -> bool:
        return self._get(f"adminkey#{hash_api_key(key)}") is not None
