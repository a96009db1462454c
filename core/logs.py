"""Keys every log line of the current invocation carries (the correlation id: a frame's request id).

The project's loggers are named ``skinflint.*``. In AWS Lambda the entry points (functions/) make a
Powertools Logger their parent, which writes each record as one JSON line, and register its
``append_keys`` here with :func:`keep_keys_with`; the front then calls :func:`append_keys` where it
makes or reads a request id. Elsewhere (the local stack, the workers, the CLI) nothing is registered
and :func:`append_keys` does nothing: their logs stay plain text."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LOGGER_NAME", "append_keys", "keep_keys_with"]

#: parent of every logger of the project (``skinflint.front``, ``skinflint.control``, ...)
LOGGER_NAME = "skinflint"

_keepers: list[Callable[..., object]] = []


def keep_keys_with(append: Callable[..., object]) -> None:
    """Register ``append(**keys)`` (a Powertools ``Logger.append_keys``): it is called with the keys
    of every :func:`append_keys` from now on."""
    if append not in _keepers:
        _keepers.append(append)


def append_keys(**keys: str) -> None:
    """Add ``keys`` to every later log line of this invocation (nothing without a registered logger)."""
    for append in _keepers:
        append(**keys)
