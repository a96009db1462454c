"""S3 adapter of the profile store (the deployed layout: one bucket, optional prefix).

boto3 is imported only here; the client is injected (``boto3.client("s3")`` in production, a moto
client in tests), and botocore's ``ClientError`` becomes :class:`profiles.errors.StoreError`.
"""

from __future__ import annotations

from typing import Any

from profiles.errors import StoreError
from profiles.store import ProfileStore

__all__ = ["S3Store"]


class S3Store(ProfileStore):
    def __init__(self, client: Any, bucket: str, prefix: str = ""):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise StoreError(f"{self.describe()}{key}: {exc}", key) from exc
        return bytes(obj["Body"].read())

    def _put(self, key: str, data: bytes) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.prefix + key, Body=data, ContentType="application/json"
            )
        except ClientError as exc:
            raise StoreError(f"{self.describe()}{key}: {exc}", key) from exc

    def _list(self, prefix: str) -> list[str]:
        from botocore.exceptions import ClientError

        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            ):
                keys += [o["Key"][len(self.prefix) :] for o in page.get("Contents", [])]
        except ClientError as exc:
            raise StoreError(f"{self.describe()}{prefix}: {exc}", prefix) from exc
        return sorted(keys)

    def upload_from(self, source: ProfileStore) -> list[str]:
        """Copy catalog, apps and profiles from another store (e.g. the local build) into S3."""
        keys = ["hardware.json", *source._list("apps/"), *source._list("data/")]
        for k in keys:
            raw = source._get(k)
            if raw is not None:
                self._put(k, raw)
        return keys
