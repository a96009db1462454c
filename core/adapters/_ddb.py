"""DynamoDB attribute-value helpers (the low-level client's typed JSON), kept tiny on purpose."""

from __future__ import annotations

from typing import Any

__all__ = ["from_item", "to_attr", "to_item"]


def to_attr(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": repr(float(value)) if isinstance(value, float) else str(value)}
    if isinstance(value, str):
        return {"S": value}
    if value is None:
        return {"NULL": True}
    raise TypeError(f"cannot store {type(value).__name__} in DynamoDB here")


def to_item(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {key: to_attr(value) for key, value in values.items() if value is not None}


def _from_attr(attr: dict[str, Any]) -> Any:
    (kind, raw), *_ = attr.items()
    if kind == "N":
        number = float(raw)
        return int(number) if number.is_integer() and "." not in raw and "e" not in raw.lower() else number
    if kind == "NULL":
        return None
    return raw


def from_item(item: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {key: _from_attr(value) for key, value in item.items()}
