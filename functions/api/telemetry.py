"""The API's telemetry route (a Powertools Router included by :mod:`functions.api.app`): ``GET /jobs/{id}/telemetry``.

The series the report, the dashboard and ``spotrun status`` draw: the training metrics the job's script reported
and its GPUs' readings, per attempt and node, read from the parts its agents put in the jobs bucket
(:func:`spotrun.control.views.telemetry.job_telemetry`, which bounds what one call reads and answers).
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path

from functions.api.errors import error_response, ok_response
from functions.api.examples import example
from functions.api.gate import ports_of
from functions.runtime import logger
from spotrun.control.views.telemetry import MAX_ANSWER_POINTS, MAX_PARTS, TelemetryAnswer, job_telemetry

router = Router()

JOB_ID = Annotated[
    str,
    Path(
        pattern=r"^[A-Za-z0-9._-]{1,128}$",
        description="The job's id.",
        openapi_examples={"job": example("A job id", value="tiny-regression-24d470213b76")},
    ),
]


@router.get(
    "/jobs/<job_id>/telemetry",
    summary="Training metrics and GPU readings",
    description="The job's training metrics (per name) and GPU readings (utilization, memory, PCIe per GPU), per "
    "attempt and node, in time order; empty until its agents have put some. A long job is read at an even "
    f"spread of its parts (at most {MAX_PARTS}) and answered with at most {MAX_ANSWER_POINTS} points, each "
    "series thinned evenly: thinned then says so, and parts_read of parts how much was read.",
    responses={
        **ok_response(TelemetryAnswer, "The job's series."),
        **error_response(404, "No job has that id."),
        **error_response(422, "A parameter fails validation; errors names each problem."),
    },
)
def telemetry(job_id: JOB_ID) -> TelemetryAnswer:
    aws = ports_of(router)
    answer = job_telemetry(job_id, store=aws.store, objects=aws.objects, jobs_bucket=aws.settings.jobs_bucket)
    logger.info(
        "telemetry",
        extra={
            "job_id": job_id,
            "parts": answer.parts,
            "parts_read": answer.parts_read,
            "bytes": answer.bytes_read,
        },
    )
    return answer
