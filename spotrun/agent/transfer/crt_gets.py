"""Whole-object GETs through the AWS Common Runtime's S3 client (``awscrt``), for staging's small files.

On 1,000 objects of 1 MiB, botocore's per-request path (building, signing and parsing each request in Python)
is most of staging's CPU, and on two cores that CPU is taken from the transfer itself
(docs/development/transfers.md). The CRT's S3 client does the request, its signature and the write to the file
in C: the same GET costs a fraction of the CPU. It is the client the AWS CLI v2 and boto3's own CRT transfer
manager use.

What stays in Python, and the same as with boto3's GET: which check a file gets
(``integrity.expectation_for`` over the response's headers) and the check itself, the temporary name and the
rename (:mod:`spotrun.agent.transfer.whole_objects`), the link checks, the retry. What the CRT does:

- one ``GetObject`` (``S3RequestType.DEFAULT``: no HeadObject first, no ranges) signed with SigV4 by the CRT,
  with the credentials of the boto3 session the agent's other clients use (refreshed as theirs are), asking for
  the object's full-object checksum in the response (``x-amz-checksum-mode``);
- the body handed to Python as it arrives (a small object's in one piece) and written into the temporary file
  staging created (``O_EXCL | O_NOFOLLOW``) through that open descriptor, 64 KiB per write
  (:mod:`spotrun.agent.transfer.file_writes`), so that nothing put at that name after it was created can be written
  through; its CRC-32 is computed as it is written (:data:`spotrun.agent.transfer.crcs.crc32`: a hundredth of a
  SHA-256's CPU with ISA-L).

The CRT is not asked to validate the checksum: its validation checks S3's checksums only, where staging puts a
commit marker's SHA-256 first, and it saves nothing (the bench's CRT tool, validating with the CRT, costs 0.98 of
staging's client CPU per verified GiB on 1,000 x 1 MiB: docs/development/transfers.md, "Figures"). An object that
carries a CRC-32 (the agent's uploads, boto3's default) is checked against the CRC-32 computed on the way in; any
other check hashes the written file once, from the page cache.

The URL of an object is botocore's: the first GET of a bucket asks the boto3 client for a presigned URL (pure
computation, no request), which applies its endpoint rules (virtual-hosted or path-style, a custom endpoint
such as the emulator's); the CRT then signs each request itself.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from typing import Any

from spotrun.agent.transfer.crcs import crc32
from spotrun.agent.transfer.file_writes import write_at
from spotrun.agent.transfer.plan import StagingError
from spotrun.agent.transfer.whole_objects import Received

# A key that needs no escaping: the part of a presigned URL's path before it is the bucket's (see below).
_PROBE_KEY = "spotrun-probe"
_ERROR_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")


class DirectGetError(StagingError):
    """The CRT's GET failed: the HTTP status and S3's error code when S3 answered, else the CRT's error."""


_RESPONSE_HEADERS = {
    "content-length": "ContentLength",
    "etag": "ETag",
    "x-amz-checksum-sha256": "ChecksumSHA256",
    "x-amz-checksum-crc32": "ChecksumCRC32",
    "x-amz-checksum-crc64nvme": "ChecksumCRC64NVME",
    "x-amz-checksum-type": "ChecksumType",
    "x-amz-server-side-encryption": "ServerSideEncryption",
    "x-amz-server-side-encryption-customer-algorithm": "SSECustomerAlgorithm",
}


class _Response:
    """The CRT's callbacks for one GET: the headers kept, each piece of the body written in place.

    When ``want_crc32`` and the response carries a CRC-32 (``x-amz-checksum-crc32``: the headers come
    before the body), the body's CRC-32 is computed as it is written, while it arrives in order.
    """

    def __init__(self, descriptor: int, want_crc32: bool):
        self._descriptor = descriptor
        self._want_crc32 = want_crc32
        self._position = 0
        self.headers: list[tuple[str, str]] = []
        self.crc32: int | None = None

    def on_headers(self, headers: list[tuple[str, str]], **_: Any) -> None:
        self.headers.extend(headers)
        if self._want_crc32 and any(name.lower() == "x-amz-checksum-crc32" for name, _ in headers):
            self.crc32 = 0

    def on_body(self, chunk: bytes, offset: int, **_: Any) -> None:
        write_at(self._descriptor, chunk, offset)
        if self.crc32 is not None and offset == self._position:
            self.crc32 = crc32(chunk, self.crc32)
            self._position += len(chunk)
        else:  # not asked for, or out of order: the check reads the file back instead
            self.crc32 = None


def response_of(headers: list[tuple[str, str]]) -> dict[str, Any]:
    """The fields of a ``get_object`` response that the verification reads, from the raw response headers."""
    found: dict[str, Any] = {}
    for name, value in headers:
        field = _RESPONSE_HEADERS.get(name.lower())
        if field is not None:
            found[field] = value
    if "ContentLength" in found:
        found["ContentLength"] = int(found["ContentLength"])
    return found


class CrtGetter:
    """GETs whole objects into open files through one CRT S3 client; thread-safe, made by :func:`crt_getter`.

    Parameters
    ----------
    s3
        The boto3 S3 client whose endpoint rules give each bucket's URL.
    credentials
        The botocore credentials to sign with (a session's ``get_credentials()``; refreshable ones are
        refreshed as they are for boto3).
    region
        The signing region.
    """

    def __init__(self, s3: Any, credentials: Any, region: str):
        self._s3 = s3
        self._credentials = credentials
        self._region = region
        self._client: Any = None
        self._addresses: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def _crt_client(self) -> Any:
        """The CRT's S3 client, made on the first GET: a step that stages nothing pays nothing (~0.1 s)."""
        import awscrt.io
        import awscrt.s3
        from s3transfer.crt import BotocoreCRTCredentialsWrapper

        with self._lock:
            if self._client is None:
                scheme = urllib.parse.urlsplit(str(self._s3.meta.endpoint_url)).scheme
                events = awscrt.io.EventLoopGroup()
                bootstrap = awscrt.io.ClientBootstrap(events, awscrt.io.DefaultHostResolver(events))
                self._client = awscrt.s3.S3Client(
                    bootstrap=bootstrap,
                    region=self._region,
                    tls_mode=(
                        awscrt.s3.S3RequestTlsMode.ENABLED
                        if scheme == "https"
                        else awscrt.s3.S3RequestTlsMode.DISABLED
                    ),
                    credential_provider=BotocoreCRTCredentialsWrapper(
                        self._credentials
                    ).to_crt_credentials_provider(),
                )
            return self._client

    def _address(self, bucket: str) -> tuple[str, str]:
        """``(host, path prefix)`` of the bucket's objects, as botocore's endpoint rules place them."""
        with self._lock:
            if bucket not in self._addresses:
                url = urllib.parse.urlsplit(
                    self._s3.generate_presigned_url(
                        "get_object", Params={"Bucket": bucket, "Key": _PROBE_KEY}
                    )
                )
                if not url.path.endswith("/" + _PROBE_KEY):
                    raise DirectGetError(f"s3://{bucket}: unexpected object URL {url.scheme}://{url.netloc}")
                self._addresses[bucket] = (url.netloc, url.path[: -len(_PROBE_KEY)])
            return self._addresses[bucket]

    def get_into(self, bucket: str, key: str, descriptor: int, *, crc32: bool = True) -> Received:
        """GET ``s3://bucket/key`` into the empty file open at ``descriptor``.

        Parameters
        ----------
        bucket, key
            The object.
        descriptor
            A file this process created for it (staging's temporary file), empty.
        crc32
            Compute the body's CRC-32 as it is written, if the object carries one (the check staging makes
            unless a SHA-256 is known in advance).

        Returns
        -------
        Received
            The response's headers as boto3 names them in ``get_object``'s response (``ContentLength``,
            ``ETag``, ``ChecksumSHA256``, ...), and the CRC-32 of the body written.

        Raises
        ------
        DirectGetError
            When the GET failed (an error response, the connection).
        """
        import awscrt.http
        import awscrt.s3

        client = self._crt_client()
        host, prefix = self._address(bucket)
        request = awscrt.http.HttpRequest(
            "GET",
            prefix + urllib.parse.quote(key, safe="/~"),
            awscrt.http.HttpHeaders(
                [("host", host), ("Content-Length", "0"), ("x-amz-checksum-mode", "ENABLED")]
            ),
        )
        response = _Response(descriptor, crc32)
        meta = client.make_request(
            type=awscrt.s3.S3RequestType.DEFAULT,
            operation_name="GetObject",
            request=request,
            # The body written here rather than by the CRT (``recv_filepath``), which writes each object in one
            # piece: 64 KiB per write keeps the kernel's side cheap (:mod:`spotrun.agent.transfer.file_writes`). A small
            # object's body arrives in one call, so this is one call into Python per object.
            on_body=response.on_body,
            on_headers=response.on_headers,
        )
        try:
            meta.finished_future.result()
        except Exception as exc:
            raise DirectGetError(f"GetObject: {_describe(exc)}") from exc
        return Received(response_of(response.headers), response.crc32)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    if status is None:
        return str(exc)
    code = _ERROR_CODE.search(bytes(getattr(exc, "body", b"") or b""))
    return f"HTTP {status}" + (f" ({code.group(1).decode(errors='replace')})" if code else "")


def crt_available() -> bool:
    """Whether the CRT can be used: ``awscrt`` is installed (the ``agent`` extra)."""
    import importlib.util

    return importlib.util.find_spec("awscrt") is not None


def crt_getter(s3: Any, credentials: Any, region: str) -> CrtGetter | None:
    """A :class:`CrtGetter` beside the boto3 client ``s3``, or None when the CRT cannot be used.

    Staging then makes every GET through ``s3`` (:func:`spotrun.agent.transfer.download.stage` without ``direct``).

    Parameters
    ----------
    s3
        The agent's boto3 S3 client (its endpoint and addressing are the CRT's).
    credentials
        The botocore credentials of that client's session.
    region
        The signing region.
    """
    if not crt_available() or credentials is None:
        return None
    return CrtGetter(s3, credentials, region)
