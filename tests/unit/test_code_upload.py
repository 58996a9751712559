"""request_code_upload over fakes: an archive of that digest and size is not uploaded again."""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError

from spotrun.control.code_upload import CodeUploadRequest, request_code_upload
from tests.unit.fakes import FakeObjects

SHA = "ab" * 32
KEY = f"code/{SHA}.tar.gz"


def test_an_object_of_another_size_at_the_address_is_uploaded_over():
    # Given an object at the archive's address whose size is not the archive's (a PUT cut short elsewhere)
    objects = FakeObjects()
    objects.objects[("jobs", KEY)] = b"12345"
    # When an upload of 6 bytes is asked, Then a PUT of exactly those is presigned
    answer = request_code_upload(CodeUploadRequest(sha256=SHA, size=6), objects=objects, jobs_bucket="jobs")
    assert answer.upload is not None
    assert objects.presigned == [("jobs", KEY, 6, base64.b64encode(bytes.fromhex(SHA)).decode())]
    # And with the matching size nothing is
    again = request_code_upload(CodeUploadRequest(sha256=SHA, size=5), objects=objects, jobs_bucket="jobs")
    assert again.upload is None
    assert again.uri == f"s3://jobs/{KEY}"


@pytest.mark.parametrize("size", [True, "5", 5.5])
def test_a_size_that_is_not_an_integer_is_refused(size: object):
    # Given a request whose size is a boolean, a numeric string or a fraction (the schema says integer)
    body = {"sha256": SHA, "size": size}

    # When it is validated / Then it is refused, not read as 1 or 5
    with pytest.raises(ValidationError, match="size"):
        CodeUploadRequest.model_validate(body)


def test_an_integral_float_size_is_an_integer_as_json_schema_counts_it():
    # Given a size written 5.0 (JSON Schema's "integer" allows it)
    body = {"sha256": SHA, "size": 5.0}

    # When it is validated / Then it is the integer 5
    assert CodeUploadRequest.model_validate(body).size == 5
