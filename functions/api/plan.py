"""The API's plan route (a Powertools Router included by :mod:`functions.api.app`): ``POST /plan``.

The plan of a manifest before paying (:mod:`spotrun.control.views.plan`): nothing is bought, recorded or started. A
manifest the deployment would refuse answers 200 too, with every reason in ``problems`` and ``ok`` false: the
plan is the answer, and a client sees all that is wrong at once. Only a body that is not a valid manifest is a
422, as for ``POST /jobs``.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from functions.api.errors import error_response, ok_response
from functions.api.examples import example
from functions.api.gate import ports_of
from functions.runtime import logger
from spotrun.control.views.plan_model import JobPlan
from spotrun.model.job.record import utc_now
from spotrun.model.manifest.schema import JobManifest

router = Router()

EXAMPLE = {
    "name": "tiny-regression",
    "resources": {"gpu_names": ["t4", "a10g"]},
    "training": {"command": ["python", "train.py"], "expected_hours": 2},
}


@router.post(
    "/plan",
    summary="Plan a job before paying",
    description="What POST /jobs would do with this manifest, without doing it: the candidate pools in the order "
    "acquisition tries them, with today's spot and on-demand prices (the first one marked), the estimated cost "
    "of training.expected_hours, the deadline policy's first decision, and every reason POST /jobs would refuse "
    "it (data inputs and code that do not exist included). A refused manifest answers 200 as well, with "
    "ok: false and its problems.",
    responses={
        **ok_response(JobPlan, "The plan; ok is false when POST /jobs would refuse the manifest."),
        **error_response(400, "The body is not JSON (or not UTF-8 text)."),
        **error_response(413, "The body is larger than the API's limit."),
        **error_response(415, "The body is not sent as JSON (Content-Type: application/json)."),
        **error_response(422, "The body is not a valid manifest; errors names each problem."),
    },
)
def plan(
    manifest: Annotated[
        JobManifest,
        Body(
            description="The job manifest (see `spotrun schema`), as for POST /jobs.",
            openapi_examples={"tiny": example("A small job", value=EXAMPLE)},
        ),
    ],
) -> JobPlan:
    # Only this route plans: the planning, with the submission's admission checks and the deadline policy, is
    # loaded by its first request rather than by every cold start of the API (docs/development/cold-start.md).
    from spotrun.control.views.plan import plan_job

    aws = ports_of(router)
    settings = aws.settings
    answer = plan_job(
        manifest,
        compute=aws.compute,
        objects=aws.objects,
        subnet_ids=settings.subnet_ids,
        archive_buckets=settings.allowed_archive_buckets,
        jobs_bucket=settings.jobs_bucket,
        now=utc_now(),
        time_scale=settings.time_scale,
        secret_references=settings.reference_patterns,
    )
    logger.info("plan", extra={"job_name": manifest.name, "ok": answer.ok, "problems": len(answer.problems)})
    return answer
