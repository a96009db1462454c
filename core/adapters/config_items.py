"""The config table's items of the control plane (the control state, the app index, the planning
requests): one string key ``pk``, plain attributes (a JSON document in ``doc``, a counter such as
``epoch`` or ``revision``, string sets). Writes can be conditional on a counter or on the item being
new; :class:`ItemConflictError` says another writer won. Reads are consistent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS, error_code
from core.adapters._ddb import from_item, to_attr, to_item
from core.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ConfigItems", "ItemConflictError"]


class ItemConflictError(ConfigError):
    """A conditional write found the item changed (or present) since it was read."""


class ConfigItems:
    def __init__(self, client: Any, table: str):
        self._ddb = client
        self.table = table

    def get(self, pk: str) -> dict[str, Any] | None:
        """The item's attributes as plain values (None: no item)."""
        try:
            item = self._ddb.get_item(TableName=self.table, Key={"pk": {"S": pk}}, ConsistentRead=True).get(
                "Item"
            )
        except AWS_ERRORS as exc:
            raise ConfigError(f"GetItem {pk}: {exc}", key=pk) from exc
        return from_item(item) if item else None

    def put(
        self,
        pk: str,
        values: Mapping[str, Any],
        *,
        if_equal: tuple[str, int] | None = None,
        if_new: bool = False,
    ) -> None:
        """Write the item; with ``if_new`` only when there is none, with ``if_equal=(attr, n)`` only
        when its ``attr`` is ``n`` (:class:`ItemConflictError` otherwise)."""
        cond: dict[str, Any] = {}
        if if_new:
            cond = {"ConditionExpression": "attribute_not_exists(pk)"}
        elif if_equal is not None:
            attr, expected = if_equal
            cond = {
                "ConditionExpression": f"{attr} = :expected",
                "ExpressionAttributeValues": {":expected": to_attr(expected)},
            }
        try:
            self._ddb.put_item(TableName=self.table, Item={"pk": {"S": pk}, **to_item(dict(values))}, **cond)
        except AWS_ERRORS as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                raise ItemConflictError(f"PutItem {pk}: changed since it was read", key=pk) from exc
            raise ConfigError(f"PutItem {pk}: {exc}", key=pk) from exc

    def scan(self, prefix: str) -> list[dict[str, Any]]:
        """Every item whose key starts with ``prefix`` (every page)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": prefix}},
            "ConsistentRead": True,
        }
        out: list[dict[str, Any]] = []
        try:
            while True:
                page = self._ddb.scan(**kwargs)
                out += [from_item(i) for i in page.get("Items", [])]
                if "LastEvaluatedKey" not in page:
                    return out
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except AWS_ERRORS as exc:
            raise ConfigError(f"Scan {prefix}*: {exc}", key=prefix) from exc

    def delete(self, pk: str) -> None:
        try:
            self._ddb.delete_item(TableName=self.table, Key={"pk": {"S": pk}})
        except AWS_ERRORS as exc:
            raise ConfigError(f"DeleteItem {pk}: {exc}", key=pk) from exc

    def add_to_set(
        self, pk: str, attr: str, members: Iterable[str], also: Mapping[str, Any] | None = None
    ) -> None:
        """Add ``members`` to the string set ``attr`` (created with the item if missing) and set the
        attributes of ``also``."""
        values: dict[str, Any] = {":members": {"SS": list(members)}}
        sets = []
        for i, (name, value) in enumerate((also or {}).items()):
            sets.append(f"{name} = :v{i}")
            values[f":v{i}"] = to_attr(value)
        expression = f"ADD {attr} :members" + (" SET " + ", ".join(sets) if sets else "")
        self._update(pk, expression, values)

    def remove_from_set(self, pk: str, attr: str, members: Iterable[str]) -> None:
        self._update(pk, f"DELETE {attr} :members", {":members": {"SS": list(members)}})

    def _update(self, pk: str, expression: str, values: dict[str, Any]) -> None:
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key={"pk": {"S": pk}},
                UpdateExpression=expression,
                ExpressionAttributeValues=values,
            )
        except AWS_ERRORS as exc:
            raise ConfigError(f"UpdateItem {pk}: {exc}", key=pk) from exc
