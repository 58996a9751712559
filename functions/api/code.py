"""The API's code-upload route (a Powertools Router included by :mod:`functions.api.app`): ``POST /code``.

``spotrun submit`` packs a workdir and asks here where to put it, so that the CLI needs no S3 permission of its
own: the function (granted ``s3:PutObject`` on ``code/*`` of the jobs bucket, and ``s3:ListBucket`` under it only)
answers with the archive's URI and, unless the object exists, a presigned PUT of exactly those bytes.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from functions.api.errors import error_response, ok_response
from functions.api.examples import example
from functions.api.gate import ports_of
from functions.runtime import logger
from spotrun.control.code_upload import CodeUpload, CodeUploadRequest, request_code_upload

router = Router()

EXAMPLE = {"sha256": "0" * 64, "size": 4096}


@router.post(
    "/code",
    summary="Ask where to upload a code archive",
    description="The archive is described by its SHA-256 and size and kept as code/<sha256>.tar.gz in the jobs "
    "bucket, the URI to put in training.code. upload is null when that object exists already (nothing to send); "
    "otherwise PUT the archive to upload.url with upload.headers: the signature covers its length and SHA-256, "
    "so S3 stores those bytes or nothing.",
    responses={
        **ok_response(CodeUpload, "Where the archive lives, and how to upload it when it is not there."),
        **error_response(400, "The body is not JSON (or not UTF-8 text)."),
        **error_response(415, "The body is not sent as JSON (Content-Type: application/json)."),
        **error_response(422, "sha256 is not 64 lower-case hex digits, or size is not 1 to 5 GiB."),
    },
)
def create_upload(
    request: Annotated[
        CodeUploadRequest,
        Body(
            description="The archive to upload.",
            openapi_examples={"archive": example("A 4 KiB archive", value=EXAMPLE)},
        ),
    ],
) -> CodeUpload:
    aws = ports_of(router)
    answer = request_code_upload(request, objects=aws.objects, jobs_bucket=aws.settings.jobs_bucket)
    logger.info("code upload", extra={"uri": answer.uri, "uploaded_before": answer.upload is None})
    return answer
