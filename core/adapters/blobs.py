"""S3: frames too large for an SQS message, and large task outputs."""

from __future__ import annotations

from typing import Any

from core.adapters._aws import AWS_ERRORS
from core.errors import BlobError

__all__ = ["BlobStore"]


class BlobStore:
    def __init__(self, client: Any, bucket: str):
        self._s3 = client
        self.bucket = bucket

    def put(self, key: str, data: bytes, content_type: str) -> None:
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except AWS_ERRORS as exc:
            raise BlobError(f"cannot write s3://{self.bucket}/{key}: {exc}", key=key) from exc

    def get(self, key: str) -> bytes:
        try:
            body: bytes = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except AWS_ERRORS as exc:
            raise BlobError(f"cannot read s3://{self.bucket}/{key}: {exc}", key=key) from exc
        return body
