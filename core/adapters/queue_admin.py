"""SQS queue lifecycle for the control plane: create a queue (idempotent for equal attributes), read
its ARN, delete it, list queues by name prefix. The data plane's messages go through
:class:`core.adapters.queues.TaskQueues`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS
from core.adapters.queues import queue_gone
from core.errors import QueueError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["QueueAdmin"]


class QueueAdmin:
    def __init__(self, client: Any):
        self._sqs = client

    def create(self, name: str, attributes: Mapping[str, str], tags: Mapping[str, str] | None = None) -> str:
        """The queue's URL (CreateQueue returns the existing queue when its attributes are equal)."""
        kwargs: dict[str, Any] = {"QueueName": name, "Attributes": dict(attributes)}
        if tags is not None:
            kwargs["tags"] = dict(tags)
        try:
            return str(self._sqs.create_queue(**kwargs)["QueueUrl"])
        except AWS_ERRORS as exc:
            raise QueueError(f"CreateQueue {name}: {exc}") from exc

    def arn(self, url: str) -> str:
        try:
            attrs = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
        except AWS_ERRORS as exc:
            raise QueueError(f"GetQueueAttributes {url}: {exc}", queue_url=url) from exc
        return str(attrs["QueueArn"])

    def delete(self, url: str) -> bool:
        """Delete a queue; False when it was already gone."""
        try:
            self._sqs.delete_queue(QueueUrl=url)
        except AWS_ERRORS as exc:
            if queue_gone(exc):  # either protocol's code (the JSON protocol says QueueDoesNotExist)
                return False
            raise QueueError(f"cannot delete {url}: {exc}", queue_url=url) from exc
        return True

    def list(self, prefix: str) -> list[str]:
        """URLs of the queues whose name starts with ``prefix`` (every page)."""
        try:
            pages = self._sqs.get_paginator("list_queues").paginate(QueueNamePrefix=prefix)
            return [str(url) for page in pages for url in page.get("QueueUrls", [])]
        except AWS_ERRORS as exc:
            raise QueueError(f"ListQueues {prefix}*: {exc}") from exc
