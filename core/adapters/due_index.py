"""The deadline index of accepted POSTs, read by the control loop's stranded-frame sweep
(control/sweeper.py). The index is the POST items themselves: the front writes each in its due
minute's partition (:meth:`core.adapters.results.ResultStore.create_frames`: ``pk =
due#<minute>#<shard>``, ``sk`` = the POST id, with its app, latest deadline, number of frames and
the frames' accept times and deadlines); only the control loop reads a minute of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.adapters._aws import AWS_ERRORS
from core.adapters._ddb import from_item
from core.adapters.results import DUE_SHARDS, due_key
from core.errors import ResultStoreError

__all__ = ["DueIndex", "DuePost"]


@dataclass(frozen=True)
class DuePost:
    """A POST of the deadline index."""

    post_id: str
    app: str
    deadline: float  # its frames' latest
    frames: int
    head: dict[str, Any] = field(default_factory=dict, compare=False)  # the POST item, as listed


class DueIndex:
    """The POSTs whose deadline falls in a minute, from the results table's deadline index."""

    def __init__(self, client: Any, table: str):
        self._ddb = client
        self._table = table

    def due_posts(self, bucket: int) -> list[DuePost]:
        """The POSTs whose deadline falls in ``bucket`` (:func:`core.ids.due_bucket`), each with its
        item: one Query per shard (each page up to 1 MB, about 1,500 POST items of 10 frames),
        eventually consistent (the items were written a minute or more before)."""
        out: list[DuePost] = []
        for shard in range(DUE_SHARDS):
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": due_key(bucket, shard)}},
            }
            while True:
                try:
                    page = self._ddb.query(**kwargs)
                except AWS_ERRORS as exc:
                    raise ResultStoreError(f"cannot read the deadline index {bucket}#{shard}: {exc}") from exc
                for item in page.get("Items", []):
                    doc = from_item(item)
                    out.append(
                        DuePost(
                            str(doc["sk"]),
                            str(doc.get("app", "")),
                            float(doc["deadline"]),
                            int(doc.get("n", 1)),
                            doc,
                        )
                    )
                if not page.get("LastEvaluatedKey"):
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return out
