"""Ranged GETs in the emulator as S3 serves them: only the bytes asked for, and ranges of one object at once.

S3 serves ``Range: bytes=first-last`` (RFC 9110 section 14.2, https://www.rfc-editor.org/rfc/rfc9110#name-range;
one range per request) with HTTP 206 and a ``Content-Range`` header
(https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html#API_GetObject_RequestSyntax), and AWS
recommends fetching a large object as concurrent byte ranges, which it serves in parallel
(https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/use-byte-range-fetches.html).

moto 5.2.5 builds every GET's body from ``FakeKey.value``, which copies the whole object out of its temporary
file under the key's lock, and only then slices the range out (``S3Response._handle_range_header``): a 256 MiB
object fetched as 16 ranges is read 16 times over, one range at a time. Here ``get_object`` answers a GET that
carries a ``Range`` header with a lazy view of the object (:class:`LazyValue`); moto's own range handling then
decides the answer exactly as before (206 and ``Content-Range`` for a satisfiable range, ``InvalidRange`` /
416 for an unsatisfiable one, the whole object with 200 for several ranges or one it cannot parse), and
slicing the view reads only that slice, with ``os.pread`` on the key's file (no shared file position, so no
lock) or under the key's lock while the object is still in memory. What moto would send whole is read whole.

moto stores an object (or a part) with one ``write`` of the whole body into its temporary file; the body is
written 64 KiB at a time instead (:func:`store`), the agent's write size (:mod:`spotrun.agent.transfer.file_writes`: on
the development machines, large writes into the page cache cost from one to several times the kernel CPU of
64 KiB ones, at random). The bytes stored are the same.

moto also computes an object's ETag lazily by seeking and reading the same buffer without the lock; concurrent
ranged GETs of a fresh object would interleave those reads and corrupt the MD5, so the ETag is computed under
the key's lock.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from spotrun.agent.transfer.file_writes import WRITE_BYTES
from spotrun.local.patches.reversible import PatchSet

_LAZY = threading.local()  # set while moto's get_object builds the body of a ranged GET on this thread


def read_range(key: Any, start: int, length: int) -> bytes:
    """Read ``length`` bytes of a moto ``FakeKey`` from ``start`` without reading the rest of the object.

    Parameters
    ----------
    key
        The ``FakeKey``.
    start
        The first byte.
    length
        How many bytes (fewer at the end of the object).

    Returns
    -------
    bytes
        The slice.
    """
    buffer = key._value_buffer  # a SpooledTemporaryFile: in memory up to its threshold, then a real file
    if length <= 0:
        return b""
    if getattr(buffer, "_rolled", False):
        descriptor = buffer.fileno()
        parts = []
        while length > 0:  # pread may return less than asked for
            chunk = os.pread(descriptor, length, start)
            if not chunk:
                break
            parts.append(chunk)
            start += len(chunk)
            length -= len(chunk)
        return b"".join(parts)
    with key.lock:
        buffer.seek(start)
        return bytes(buffer.read(length))


class LazyValue:
    """An object's bytes as moto's range handling uses them (``len`` and one slice), read only when sliced."""

    def __init__(self, key: Any):
        self.key = key
        self.size = int(key.size)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __getitem__(self, index: slice) -> bytes:
        start, stop, step = index.indices(self.size)
        if step != 1:
            raise ValueError("only contiguous slices of an object are read")
        return read_range(self.key, start, stop - start)

    def __bytes__(self) -> bytes:
        return read_range(self.key, 0, self.size)


def store(key: Any, body: bytes) -> None:
    """Set a moto ``FakeKey``'s body as moto's own setter does, writing it :data:`WRITE_BYTES` at a time.

    Parameters
    ----------
    key
        The ``FakeKey`` (an object, or a part of a multipart upload).
    body
        Its new bytes.
    """
    buffer = key._value_buffer
    buffer.seek(0)
    buffer.truncate()
    if len(body) <= key._max_buffer_size:
        buffer.write(body)  # it stays in memory (moto keeps bodies up to this size there)
    else:
        buffer.rollover()  # onto its file first, rather than out of memory in one write when it outgrows it
        view = memoryview(body)
        for start in range(0, len(view), WRITE_BYTES):
            buffer.write(view[start : start + WRITE_BYTES])
    key.contentsize = len(body)


def _is_single_part_ranged_get(response: Any) -> bool:
    headers = response.headers
    return (
        response.request.method == "GET"
        and bool(headers.get("range"))
        # A GET of one part (partNumber) is answered whole by moto, without its range handling.
        and "partNumber" not in response.querystring
    )


def install(patches: PatchSet) -> None:
    """Serve ranged GETs by reading only the range, and compute ETags under the key's lock.

    Parameters
    ----------
    patches
        Where the patches are kept (undone when the runtime stops).
    """
    from moto.s3.models import FakeKey
    from moto.s3.responses import S3Response

    value_property: Any = vars(FakeKey)["value"]  # the property objects, for their getter and setter
    etag_property: Any = vars(FakeKey)["etag"]
    original_get_object = S3Response.get_object
    original_key_response = S3Response.key_response

    def get_object(self: Any) -> Any:
        if not _is_single_part_ranged_get(self):
            return original_get_object(self)
        # moto's get_object reads ``key.value`` once, for the body: in this call, on this thread, it is lazy.
        _LAZY.active = True
        try:
            return original_get_object(self)
        finally:
            _LAZY.active = False

    def key_response(self: Any, request: Any, full_url: str, headers: Any) -> Any:
        status, response_headers, body = original_key_response(self, request, full_url, headers)
        if isinstance(body, LazyValue):  # moto decided to send the whole object (several ranges, say)
            body = bytes(body)
        return status, response_headers, body

    def value(key: Any) -> Any:
        if getattr(_LAZY, "active", False):
            return LazyValue(key)
        return value_property.fget(key)

    def set_value(key: Any, body: bytes | str) -> None:
        if isinstance(body, str):  # moto's own tests set text; nothing of the runtime does
            value_property.fset(key, body)
            return
        store(key, body)

    def etag(key: Any) -> str:
        with key.lock:
            return str(etag_property.fget(key))

    patches.add(FakeKey, "value", property(value, set_value))
    patches.add(FakeKey, "etag", property(etag))
    patches.add(S3Response, "get_object", get_object)
    patches.add(S3Response, "key_response", key_response)
