"""The S3 adapter of :class:`spotrun.control.ports.Objects` (its client from :func:`spotrun.aws.adapters.client`)."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from botocore.exceptions import ClientError

from spotrun.aws.adapters import client
from spotrun.control.ports import ObjectMissing, ObjectsUnreadable

_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
CODE_ARCHIVE_TYPE = "application/gzip"


class S3Objects:
    """:class:`spotrun.control.ports.Objects` on S3."""

    def __init__(self, region: str):
        self._s3 = client("s3", region)
        self._region = region

    def put_json(self, bucket: str, key: str, document: Any) -> None:
        body = json.dumps(document, indent=2, default=str).encode()
        self._s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")

    def get_bytes(self, bucket: str, key: str) -> bytes:
        try:
            answer = self._s3.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            # NoSuchKey (404) only when the caller may list the bucket; without s3:ListBucket S3 answers
            # AccessDenied (403) instead, which stays an error
            # (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html, "Permissions").
            if exc.response["Error"]["Code"] in _MISSING_CODES:
                raise ObjectMissing(f"s3://{bucket}/{key} does not exist") from exc
            raise
        return bytes(answer["Body"].read())

    def list_keys(self, bucket: str, prefix: str) -> list[tuple[str, int]]:
        keys = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [(item["Key"], int(item["Size"])) for item in page.get("Contents", [])]
        return keys

    def list_versions(self, bucket: str, prefix: str) -> list[tuple[str, str, int]]:
        found = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found += [(item["Key"], item["ETag"], int(item["Size"])) for item in page.get("Contents", [])]
        return sorted(found)

    def copy(self, source: tuple[str, str], destination: tuple[str, str], storage_class: str) -> None:
        self._s3.copy(
            CopySource={"Bucket": source[0], "Key": source[1]},
            Bucket=destination[0],
            Key=destination[1],
            ExtraArgs={"StorageClass": storage_class, "MetadataDirective": "COPY"},
        )

    def get_tail(self, bucket: str, key: str, max_bytes: int) -> bytes | None:
        try:
            answer = self._s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{max_bytes}")
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "InvalidRange":  # an empty object has no last bytes
                return b""
            if code in _MISSING_CODES:
                return None
            raise
        return bytes(answer["Body"].read())

    def first_key(self, bucket: str, prefix: str) -> str | None:
        # One ListObjectsV2 of one key answers both questions: S3 lists keys in ascending UTF-8 order, so an
        # object named exactly ``prefix`` comes first (https://docs.aws.amazon.com/AmazonS3/latest/API/
        # API_ListObjectsV2.html: "Objects are returned sorted in an ascending order of the respective key
        # names"), and only s3:ListBucket is needed, never a read of the data.
        try:
            answer = self._s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "NoSuchBucket":
                raise ObjectsUnreadable(f"the bucket {bucket!r} does not exist") from exc
            if code in ("AccessDenied", "AllAccessDisabled"):
                raise ObjectsUnreadable(
                    f"this deployment may not list the bucket {bucket!r} ({code}): have the deployer add it "
                    "to the CDK option data_buckets"
                ) from exc
            raise
        contents = answer.get("Contents") or []
        return str(contents[0]["Key"]) if contents else None

    def head(self, bucket: str, key: str) -> dict[str, str] | None:
        try:
            answer = self._s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in _MISSING_CODES:
                return None
            raise
        return {"storage_class": answer.get("StorageClass", "STANDARD"), "restore": answer.get("Restore", "")}

    def restore(self, bucket: str, key: str, days: int) -> None:
        try:
            self._s3.restore_object(
                Bucket=bucket,
                Key=key,
                RestoreRequest={"Days": days, "GlacierJobParameters": {"Tier": "Standard"}},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "RestoreAlreadyInProgress":
                raise

    def presign_put(
        self, bucket: str, key: str, *, size: int, sha256_b64: str, expires_seconds: int
    ) -> tuple[str, dict[str, str]]:
        # SigV4 signs the parameters sent as headers into the URL (X-Amz-SignedHeaders), so a PUT with another
        # length, type or checksum is refused (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html);
        # botocore presigns with SigV2 for some endpoints unless told.
        presigner = client("s3", self._region, signature_version="s3v4")
        url = presigner.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": bucket,
                "Key": key,
                "ContentLength": size,
                "ContentType": CODE_ARCHIVE_TYPE,
                "ChecksumSHA256": sha256_b64,
            },
            ExpiresIn=expires_seconds,
        )
        values = {
            "content-length": str(size),
            "content-type": CODE_ARCHIVE_TYPE,
            "x-amz-checksum-sha256": sha256_b64,
        }
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        signed = (query.get("X-Amz-SignedHeaders") or [""])[0].split(";")
        return url, {name: values[name] for name in signed if name in values}
