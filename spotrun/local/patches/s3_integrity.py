"""S3 integrity in the emulator: checksum headers and presigned URLs' signatures, as S3 checks them.

moto 5.2.5 stores whatever a PUT carries: it neither checks an ``x-amz-checksum-*`` header against the body nor
verifies a presigned URL's signature. The code upload (:mod:`spotrun.control.code_upload`) relies on both, and
the agent's uploads on the first (a SHA-256 per object, a CRC-32 per part), so the emulator checks them as S3
does:

- a PUT (an object, or a part of a multipart upload) whose ``x-amz-checksum-sha256``, ``-sha1``, ``-crc32``,
  ``-crc32c`` or ``-crc64nvme`` header differs from that checksum of its body fails with HTTP 400 ``BadDigest``
  ("If the checksum that you specify doesn't match the checksum that S3 calculates, S3 rejects the request",
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html; the error code:
  https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html). CRC-32C and CRC-64/NVME are checked
  when the CRT (``awscrt``) is installed; a checksum sent in an ``aws-chunked`` trailer is not checked;
- a presigned SigV4 request (``X-Amz-Signature`` in the query string) is signed again over the headers its
  ``X-Amz-SignedHeaders`` names, as the request carries them, with the secret of its access key (the emulator's
  own credentials, or a session moto's STS issued); a mismatch, a signed header missing, or an expired URL fails
  with HTTP 403 ``SignatureDoesNotMatch`` / ``AccessDenied``
  (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html). A presigned URL whose key
  is unknown to the emulator is served as before;
- ``x-amz-checksum-mode`` is read without regard to case. The AWS Common Runtime's S3 client (the AWS CLI v2's)
  sends ``enabled`` when it validates a download (aws-c-s3, ``source/s3_util.c``: ``g_enabled``) and S3 answers
  it with the object's checksum; moto 5.2.5 compares the value with ``ENABLED`` exactly and would leave the
  checksum out.

It also computes a multipart upload's full-object checksum as the parts are joined, the same value moto computes,
without moto's two extra copies of the whole object (see :func:`full_object_checksums`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from spotrun.agent.transfer.crcs import crc32
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.server import ACCOUNT_ID, FAKE_CREDENTIALS

_UNSIGNED = "UNSIGNED-PAYLOAD"
_CHECKSUM_MODE = "HTTP_X_AMZ_CHECKSUM_MODE"  # the WSGI environ's name of the x-amz-checksum-mode header


def _secret_of(access_key: str) -> str | None:
    if access_key == FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"]:
        return FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    from moto.sts.models import sts_backends

    session = sts_backends[ACCOUNT_ID]["aws"].get_assumed_role_from_access_key(access_key)
    return None if session is None else str(session.secret_access_key)


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="-_.~")


def expected_signature(
    method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], secret: str
) -> str:
    """The SigV4 query-string signature of a presigned request (S3: unsigned payload, path not re-encoded).

    Parameters
    ----------
    method
        The HTTP method.
    path
        The request's path as sent (already URI-encoded).
    query
        Its query parameters, ``X-Amz-Signature`` included or not (left out of the canonical query).
    headers
        The values of the signed headers, by lower-case name.
    secret
        The secret access key of ``X-Amz-Credential``'s key.

    Returns
    -------
    str
        The signature in lower-case hex.
    """
    params = sorted(
        (_quote(name), _quote(value))
        for name, values in query.items()
        if name != "X-Amz-Signature"
        for value in values
    )
    canonical_query = "&".join(f"{name}={value}" for name, value in params)
    signed = query["X-Amz-SignedHeaders"][0].split(";")
    canonical_headers = "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed)
    canonical = "\n".join([method, path, canonical_query, canonical_headers, ";".join(signed), _UNSIGNED])
    _key, date, region, service, _ = query["X-Amz-Credential"][0].split("/")
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", query["X-Amz-Date"][0], scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{secret}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def presign_problem(method: str, path: str, query: dict[str, list[str]], headers: Any) -> str | None:
    """Why S3 would refuse this presigned request (None: it would not, or it is not a presigned SigV4 one)."""
    if "X-Amz-Signature" not in query or "X-Amz-SignedHeaders" not in query:
        return None
    secret = _secret_of(query["X-Amz-Credential"][0].split("/", 1)[0])
    if secret is None:
        return None
    issued = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    if datetime.now(UTC) > issued + timedelta(seconds=int(query["X-Amz-Expires"][0])):
        return "Request has expired"
    values: dict[str, str] = {}
    for name in query["X-Amz-SignedHeaders"][0].split(";"):
        value = headers.get(name)
        if value is None:
            return f"the signed header {name} is missing"
        values[name] = str(value)
    if not hmac.compare_digest(
        expected_signature(method, path, query, values, secret), query["X-Amz-Signature"][0]
    ):
        return "The request signature we calculated does not match the signature you provided."
    return None


def _running_checksums() -> dict[str, tuple[Callable[[bytes, int], int], int]]:
    # The algorithms S3 offers a FULL_OBJECT checksum for (CRC-64/NVME, CRC-32, CRC-32C: "Full object checksums",
    # https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html), each a function that
    # continues a running value, and its width in bytes. CRC-32 is the agent's fastest (ISA-L's, else zlib's: the
    # CRC moto's binascii.crc32 computes); the other two are the CRT's, as moto computes them, when it is installed.
    running: dict[str, tuple[Callable[[bytes, int], int], int]] = {"CRC32": (crc32, 4)}
    try:
        from awscrt import checksums
    except ImportError:  # moto then computes them its own way: the original builder is kept for them
        return running
    running["CRC32C"] = (checksums.crc32c, 4)
    running["CRC64NVME"] = (checksums.crc64nvme, 8)
    return running


def _crc_digest(function: Callable[[bytes, int], int], width: int) -> Callable[[bytes], bytes]:
    return lambda body: function(body, 0).to_bytes(width, "big")


@functools.cache
def _digests() -> dict[str, Callable[[bytes], bytes]]:
    # What S3 computes for each checksum header a PUT may carry: the digest, or the CRC as big-endian bytes.
    digests: dict[str, Callable[[bytes], bytes]] = {
        "SHA256": lambda body: hashlib.sha256(body).digest(),
        "SHA1": lambda body: hashlib.sha1(body, usedforsecurity=False).digest(),
    }
    for algorithm, (function, width) in _running_checksums().items():
        digests[algorithm] = _crc_digest(function, width)
    return digests


def checksum_mismatch(headers: Any, body: Any) -> str | None:
    """The algorithm of the first ``x-amz-checksum-*`` header that differs from the body's checksum, if any.

    Parameters
    ----------
    headers
        The request's headers (any mapping that ``get``s case-insensitively, as moto's do).
    body
        The request's body (``bytes``, or what moto holds for an empty one).

    Returns
    -------
    str or None
        ``"SHA256"``, ``"CRC32"``, ...: what S3 names in its ``BadDigest`` message; None when every checksum
        header the request carries matches (or it carries none).
    """
    data: bytes | None = None
    for algorithm, digest in _digests().items():
        sent = headers.get(f"x-amz-checksum-{algorithm.lower()}")
        if sent is None:
            continue
        if data is None:
            data = body if isinstance(body, bytes) else bytes(body or b"")
        if base64.b64encode(digest(data)).decode() != sent:
            return algorithm
    return None


def full_object_checksums(patches: PatchSet) -> None:
    """Compute a multipart upload's FULL_OBJECT checksum part by part as moto joins them, without copying them.

    moto 5.2.5's ``MultipartChecksumBuilder`` appends every part to a buffer of its own, copies that buffer into
    one ``bytes`` and computes the checksum over it at completion: two more copies of the whole object, on top of
    the object itself, under the server's GIL (about a second of the emulator's CPU per GiB, and zlib's CRC-32 at
    a third of a second more). S3 computes the same value without costing the client's machine anything. Here a
    running CRC continues over each part as moto adds it, giving moto's value. It also gives the right CRC-32C
    where moto, without the optional ``crc32c`` package, would compute a CRC-32 in its place. A COMPOSITE
    checksum, or an algorithm with no running function here, is left to moto.

    Parameters
    ----------
    patches
        Where the patches are kept (undone when the runtime stops).
    """
    from moto.s3.models import MultipartChecksumBuilder

    running = _running_checksums()
    original_add = MultipartChecksumBuilder.addPart
    original_build = MultipartChecksumBuilder.build

    def running_of(builder: Any) -> tuple[Callable[[bytes, int], int], int] | None:
        return running.get(builder.checksum_algorithm) if builder.checksum_type == "FULL_OBJECT" else None

    def add_part(self: Any, part: bytes) -> None:
        found = running_of(self)
        if found is None:
            original_add(self, part)
            return
        self.running_value = found[0](part, getattr(self, "running_value", 0))
        self.part_count += 1

    def build(self: Any) -> tuple[str, str, int] | None:
        found = running_of(self)
        if found is None:
            return original_build(self)
        value = getattr(self, "running_value", 0).to_bytes(found[1], "big")
        return self.checksum_type, base64.b64encode(value).decode(), 1

    patches.add(MultipartChecksumBuilder, "addPart", add_part)
    patches.add(MultipartChecksumBuilder, "build", build)


def install(patches: PatchSet) -> None:
    """Check checksum headers and presigned signatures of S3 requests (see the module's docstring).

    Parameters
    ----------
    patches
        Where the patch is kept (undone when the runtime stops).
    """
    from moto.s3.exceptions import S3ClientError
    from moto.s3.responses import S3Response

    original = S3Response._authenticate_and_authorize_s3_action

    def authorize(self: Any, bucket_name: str | None = None, key_name: str | None = None) -> None:
        request = self.request
        # moto's headers are a view of the WSGI environ (werkzeug's EnvironHeaders), read live.
        environ = getattr(request, "environ", None)
        if environ is not None and str(environ.get(_CHECKSUM_MODE, "")).upper() == "ENABLED":
            environ[_CHECKSUM_MODE] = "ENABLED"
        # The URL's own query (moto's querystring also holds what it adds, such as Action).
        query = urllib.parse.parse_qs(request.query_string.decode(), keep_blank_values=True)
        problem = presign_problem(request.method, request.path, query, self.headers)
        if problem is not None:
            code = "AccessDenied" if problem == "Request has expired" else "SignatureDoesNotMatch"
            raise S3ClientError(code, problem)
        if request.method == "PUT" and key_name:
            mismatch = checksum_mismatch(self.headers, self.body)
            if mismatch is not None:
                raise S3ClientError(
                    "BadDigest", f"The {mismatch} you specified did not match the calculated checksum."
                )
        original(self, bucket_name=bucket_name, key_name=key_name)

    patches.add(S3Response, "_authenticate_and_authorize_s3_action", authorize)
    full_object_checksums(patches)
