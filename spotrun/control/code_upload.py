"""Code uploads: where the CLI puts a packed workdir, so that it needs no S3 permission of its own.

The CLI asks for an upload of an archive it describes by SHA-256 and size (``POST /code``); the archive's key is
its content, ``code/<sha256>.tar.gz`` in the jobs bucket. When that object exists the answer carries no upload
(an unchanged directory is uploaded once); otherwise it carries a presigned PUT whose signature covers the
content length and the ``x-amz-checksum-sha256`` header, so S3 stores those bytes or nothing: a body of another
digest fails with ``BadDigest``, another length or header value with ``SignatureDoesNotMatch``
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html,
https://docs.aws.amazon.com/AmazonS3/latest/userguide/PresignedUrlUploadObject.html).
"""

from __future__ import annotations

import base64
from typing import Annotated, Final

from pydantic import ConfigDict, Field

from spotrun.control.ports import Objects
from spotrun.model.base import DeferredModel
from spotrun.model.layout import code_archive_key
from spotrun.model.manifest.rules import JsonInt

# The largest object one PUT may carry (https://docs.aws.amazon.com/AmazonS3/latest/userguide/upload-objects.html).
MAX_CODE_ARCHIVE_BYTES: Final = 5 * 1024**3
# Long enough for a slow link to send a large archive; the URL is good for this one object only.
UPLOAD_URL_SECONDS: Final = 3600


class CodeUploadRequest(DeferredModel):
    """The archive the CLI wants to upload."""

    model_config = ConfigDict(extra="forbid")

    sha256: Annotated[
        str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the archive, lower-case hex.")
    ]
    # Not true for 1, nor "5" for 5: a request the schema refuses is refused.
    size: JsonInt = Field(
        ge=1, le=MAX_CODE_ARCHIVE_BYTES, description="Bytes of the archive (one PUT: at most 5 GiB)."
    )


class UploadTarget(DeferredModel):
    """A presigned PUT of exactly the described archive."""

    url: str = Field(description="PUT the archive here.")
    headers: dict[str, str] = Field(description="Send these headers, as given: the signature covers them.")
    expires_in: int = Field(description="Seconds the URL stays valid.")


class CodeUpload(DeferredModel):
    """Where the archive lives, and how to put it there when it is not there yet."""

    uri: str = Field(description="s3:// URI of the archive: the manifest's training.code.")
    upload: UploadTarget | None = Field(description="None when the object exists already: nothing to upload.")


def request_code_upload(request: CodeUploadRequest, *, objects: Objects, jobs_bucket: str) -> CodeUpload:
    """The archive's URI, and a presigned PUT unless the jobs bucket holds it already.

    Parameters
    ----------
    request
        The archive's SHA-256 and size (validated at the edge).
    objects
        S3.
    jobs_bucket
        The deployment's jobs bucket.

    Returns
    -------
    CodeUpload
        ``upload`` is None when ``code/<sha256>.tar.gz`` exists.
    """
    key = code_archive_key(request.sha256)
    uri = f"s3://{jobs_bucket}/{key}"
    # The key is the content's digest, and every PUT of it is checked against that digest: an existing object
    # of that size holds these bytes. A listing rather than HeadObject, which answers 403 instead of 404 for a
    # missing key to a caller without s3:ListBucket
    # (https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html); the function lists code/ only.
    if (key, request.size) in objects.list_keys(jobs_bucket, key):
        return CodeUpload(uri=uri, upload=None)
    checksum = base64.b64encode(bytes.fromhex(request.sha256)).decode()
    url, headers = objects.presign_put(
        jobs_bucket, key, size=request.size, sha256_b64=checksum, expires_seconds=UPLOAD_URL_SECONDS
    )
    return CodeUpload(uri=uri, upload=UploadTarget(url=url, headers=headers, expires_in=UPLOAD_URL_SECONDS))
