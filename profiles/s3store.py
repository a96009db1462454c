"""S3 adapter of the profile store (the deployed layout: one bucket, optional prefix).

boto3 is imported only here; the client is injected (``boto3.client("s3")`` in production, a moto
client in tests), and botocore's errors become :class:`profiles.errors.StoreError`: a service's
``ClientError`` and a failure without an answer (botocore's ``ConnectionError`` and ``HTTPClientError``:
endpoint unreachable, timeout, after the SDK's retries; no credentials) alike, as
``core.adapters._aws.AWS_ERRORS`` does. ``profiles`` does not import ``functions`` (it stays
importable on its own), so it builds the same tuple here (:func:`_aws_errors`).
"""

from __future__ import annotations

from typing import Any

from profiles.errors import StoreError
from profiles.store import ProfileStore

__all__ = ["S3Store"]


def _aws_errors() -> tuple[type[Exception], ...]:
    # botocore only here: profiles imports without the AWS SDK (lint-imports' profiles contract)
    from botocore.exceptions import (
        ClientError,
        ConnectionError,  # noqa: A004 - botocore's, not the builtin
        CredentialRetrievalError,
        HTTPClientError,
        NoCredentialsError,
    )

    return (ClientError, ConnectionError, HTTPClientError, NoCredentialsError, CredentialRetrievalError)


class S3Store(ProfileStore):
    def __init__(self, client: Any, bucket: str, prefix: str = ""):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _get(self, key: str) -> bytes | None:
        aws_errors = _aws_errors()
        try:  # the body streams: reading it can fail on the network too
            return bytes(self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read())
        except aws_errors as exc:
            response = getattr(exc, "response", None)  # a ClientError's (the service answered)
            code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
            if code in ("NoSuchKey", "404"):
                return None
            raise StoreError(f"{self.describe()}{key}: {exc}", key) from exc

    def _put(self, key: str, data: bytes) -> None:
        aws_errors = _aws_errors()
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.prefix + key, Body=data, ContentType="application/json"
            )
        except aws_errors as exc:
            raise StoreError(f"{self.describe()}{key}: {exc}", key) from exc

    def _list(self, prefix: str) -> list[str]:
        aws_errors = _aws_errors()
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            ):
                keys += [obj["Key"][len(self.prefix) :] for obj in page.get("Contents", [])]
        except aws_errors as exc:
            raise StoreError(f"{self.describe()}{prefix}: {exc}", prefix) from exc
        return sorted(keys)

    def upload_from(self, source: ProfileStore) -> list[str]:
        """Copy catalog, apps and profiles from another store (e.g. the local build) into S3."""
        keys = ["hardware.json", *source._list("apps/"), *source._list("data/")]
        for key in keys:
            raw = source._get(key)
            if raw is not None:
                self._put(key, raw)
        return keys
