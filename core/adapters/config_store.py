"""The config table: deployments (plan + queues + origin), hashed API and admin keys, worker
assignments, worker heartbeats. One string key ``pk``; the value is a JSON document in ``doc``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core.adapters._aws import AWS_ERRORS
from core.errors import ConfigError
from core.schema import Assignment, Deployment

__all__ = ["ConfigStore", "hash_api_key"]


def hash_api_key(key: str) -> str:
    """SHA-256 hex digest of an API key: only this is stored."""
    return hashlib.sha256(key.encode()).hexdigest()


class ConfigStore:
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

    def _scan_prefix(self, prefix: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": prefix}},
        }
        try:
            while True:
                page = self._ddb.scan(**kwargs)
                out.extend((i["pk"]["S"], i["doc"]["S"]) for i in page.get("Items", []))
                if "LastEvaluatedKey" not in page:
                    return out
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except AWS_ERRORS as exc:
            raise ConfigError(f"cannot scan {prefix}*: {exc}", key=prefix) from exc

    # -- deployments -----------------------------------------------------------------------------
    def put_deployment(self, deployment: Deployment) -> None:
        self._put(f"app#{deployment.app}", deployment.model_dump_json())

    def get_deployment(self, app: str) -> Deployment | None:
        doc = self._get(f"app#{app}")
        return Deployment.model_validate_json(doc) if doc else None

    def list_apps(self) -> list[str]:
        return sorted(pk.removeprefix("app#") for pk, _ in self._scan_prefix("app#"))

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

    # -- workers ----------------------------------------------------------------------------------
    def put_assignment(self, assignment: Assignment) -> None:
        self._put(f"worker#{assignment.worker_id}", assignment.model_dump_json())

    def get_assignment(self, worker_id: str) -> Assignment:
        doc = self._get(f"worker#{worker_id}")
        if doc is None:
            raise ConfigError(f"no assignment for worker {worker_id!r}", key=f"worker#{worker_id}")
        return Assignment.model_validate_json(doc)

    def put_heartbeat(self, worker_id: str, info: dict[str, Any]) -> None:
        self._put(f"heartbeat#{worker_id}", json.dumps(info))

    def heartbeats(self) -> dict[str, dict[str, Any]]:
        return {pk.removeprefix("heartbeat#"): json.loads(doc) for pk, doc in self._scan_prefix("heartbeat#")}
