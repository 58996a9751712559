"""Lambda: the REST API (API Gateway, IAM auth) over jobs, every path but the agent's (:mod:`functions.api.agent_app`).

Its OpenAPI document is generated from this module's resolver and the agent function's (:mod:`functions.api.openapi`).

Each route parses its input (the resolver validates it against the models below), calls one function of the
core and returns a model. Every refusal is a 4xx whose body names the problem; nothing leaks a stack trace.
"""

from __future__ import annotations

from functions.import_window import collection_paused

# The API's cold start is mostly these imports (Powertools' REST resolver with every event data class, boto3, the
# job record, the routes' answer models and the use cases most routes call): the collector stays off while they
# run (functions.import_window; the window functions.runtime opens inside this one is then a no-op). What one
# route alone calls (POST /jobs' submission and idempotency, the plan's and the schedules' use cases) is
# imported by that route, at its first request (docs/development/cold-start.md, "The rule").
with collection_paused():
    from typing import Annotated, Any

    from aws_lambda_powertools.event_handler import Response, content_types
    from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
    from aws_lambda_powertools.metrics import MetricUnit
    from pydantic import Field

    from functions.api.code import router as code_router
    from functions.api.errors import error_response, ok_response, register_error_handlers
    from functions.api.examples import example
    from functions.api.gate import MAX_BODY_BYTES, answer, ports_of, resolver
    from functions.api.plan import router as plan_router
    from functions.api.schedules import router as schedules_router
    from functions.api.telemetry import router as telemetry_router
    from functions.runtime import Ports, RawInvocation, function_handler, logger, metrics
    from spotrun.control.progress import job_progress
    from spotrun.control.views.artifacts import (
        JobLogs,
        RestoreReport,
        job_logs,
        restore_status,
        start_restore,
    )
    from spotrun.control.views.jobs import (
        CancelResult,
        JobPage,
        JobView,
        cancel_job,
        get_job,
        job_view,
        list_jobs,
    )
    from spotrun.model.base import DeferredModel
    from spotrun.model.errors import RequestRejected
    from spotrun.model.job.record import JobStatus, utc_now
    from spotrun.model.manifest.schema import JobManifest

app = resolver()

EXAMPLE_JOB_ID = "tiny-regression-24d470213b76"
EXAMPLE_MANIFEST = {
    "name": "tiny-regression",
    "resources": {"gpu_names": ["t4", "a10g"]},
    "training": {"command": ["python", "train.py"]},
}
JOB_ID = Annotated[
    str,
    Path(
        pattern=r"^[A-Za-z0-9._-]{1,128}$",
        description="The job's id.",
        openapi_examples={"job": example("A job id", value=EXAMPLE_JOB_ID)},
    ),
]


class SubmitAccepted(DeferredModel):
    """A job was started (or had been, by an earlier delivery of the same request)."""

    job_id: str
    execution_arn: str | None = None
    outcome: str = Field(
        description="started, or duplicate when this submission was seen before (nothing new started: the job "
        "named may have ended; GET /jobs/{id} says, and a new Idempotency-Key runs the manifest again)."
    )


NOT_FOUND = error_response(404, "No job has that id.")
INVALID = error_response(422, "A parameter or the body fails validation; errors names each problem.")
UNSUPPORTED = error_response(415, "The body is not sent as JSON (Content-Type: application/json).")


# ----------------------------------------------------------------------------------------------- routes


@app.post(
    "/jobs",
    summary="Submit a job",
    description="Starts the manifest's job. A retried request (same Idempotency-Key, or the same manifest when "
    "no key is given) starts one job and answers with the same id.",
    responses={
        202: {
            "description": "The job is started.",
            "content": {content_types.APPLICATION_JSON: {"model": SubmitAccepted}},
        },
        **error_response(400, "The body is not JSON (or not UTF-8 text)."),
        **error_response(
            409, "The Idempotency-Key was used with another manifest, or the first request still runs."
        ),
        **error_response(413, f"The body is larger than {MAX_BODY_BYTES} bytes."),
        **UNSUPPORTED,
        **INVALID,
    },
)
def submit(
    manifest: Annotated[
        JobManifest,
        Body(
            description="The job manifest (see `spotrun schema`).",
            openapi_examples={"tiny": example("A small job", value=EXAMPLE_MANIFEST)},
        ),
    ],
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")
    ] = None,
) -> Response[SubmitAccepted]:
    # This route alone submits: the submission (with the deadline policy it checks a manifest against) and
    # Powertools' idempotency are loaded by its first request, not by every cold start of the API.
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    from spotrun.control.submission import api_source, manifest_sha256, submit_api_manifest

    aws = ports_of(app)
    request = {
        "identity": api_source(manifest, idempotency_key).key,
        "manifest_sha256": manifest_sha256(manifest),
        "manifest": manifest.model_dump(mode="json"),
    }
    config = IdempotencyConfig(event_key_jmespath="identity", payload_validation_jmespath="manifest_sha256")
    config.register_lambda_context(app.lambda_context)
    started_now: list[bool] = []

    def start(request: dict[str, Any]) -> dict[str, Any]:
        started_now.append(True)
        outcome = submit_api_manifest(
            JobManifest.model_validate(request["manifest"]),
            idempotency_key=idempotency_key,
            store=aws.store,
            objects=aws.objects,
            workflows=aws.workflows,
            state_machine_arn=aws.settings.state_machine_arn,
            time_scale=aws.settings.time_scale,
            archive_buckets=aws.settings.allowed_archive_buckets,
            now=utc_now(),
            jobs_bucket=aws.settings.jobs_bucket,
            secret_references=aws.settings.reference_patterns,
        )
        metrics.add_metric(name=f"Jobs{outcome.outcome.capitalize()}", unit=MetricUnit.Count, value=1)
        return outcome.model_dump(mode="json", include={"job_id", "execution_arn", "outcome"})

    once = idempotent_function(
        data_keyword_argument="request",
        persistence_store=aws.idempotency,
        config=config,
        key_prefix="spotrun-api-submit",
    )(start)
    try:
        accepted = SubmitAccepted.model_validate(once(request=request))
    except IdempotencyValidationError as exc:
        raise RequestRejected(
            "this Idempotency-Key was used with a different manifest; use a new key", status=409
        ) from exc
    except IdempotencyAlreadyInProgressError as exc:
        raise RequestRejected(
            "the same submission is still being handled; retry in a few seconds", status=409
        ) from exc
    if not started_now:  # Powertools replayed the first request's answer: this one started nothing
        accepted = accepted.model_copy(update={"outcome": "duplicate"})
    logger.info("job submitted through the API", extra=accepted.model_dump())
    return Response(202, content_types.APPLICATION_JSON, accepted)


@app.get(
    "/jobs",
    summary="List jobs, newest first",
    responses={
        **ok_response(JobPage, "A page of jobs."),
        **INVALID,
        **error_response(400, "Bad next_token."),
    },
)
def list_(
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    name: Annotated[
        str | None, Query(min_length=1, max_length=128, description="Only jobs of this name.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    next_token: Annotated[str | None, Query(min_length=1, max_length=2048)] = None,
) -> JobPage:
    return list_jobs(
        ports_of(app).store, status=status, name=name, limit=limit, next_token=next_token, now=utc_now()
    )


@app.get(
    "/jobs/<job_id>",
    summary="Show a job",
    description="Status, attempts, timeline, cost and archived artifacts.",
    responses={**ok_response(JobView, "The job."), **NOT_FOUND, **INVALID},
)
def show(job_id: JOB_ID) -> JobView:
    aws = ports_of(app)
    job = get_job(aws.store, job_id)
    progress = job_progress(job, objects=aws.objects, jobs_bucket=aws.settings.jobs_bucket, now=utc_now())
    return job_view(job).model_copy(update={"progress": progress})


@app.delete(
    "/jobs/<job_id>",
    summary="Cancel a job",
    description="Stops its workflow and terminates its instances; its committed checkpoints are kept.",
    responses={
        **ok_response(CancelResult, "The job is cancelled."),
        **NOT_FOUND,
        **error_response(409, "The job has ended already."),
        **INVALID,
    },
)
def cancel(job_id: JOB_ID) -> CancelResult:
    aws = ports_of(app)
    result = cancel_job(
        job_id,
        store=aws.store,
        workflows=aws.workflows,
        compute=aws.compute,
        now=utc_now(),
    )
    logger.info("job cancelled", extra={"job_id": job_id, "instances": result.instances_terminated})
    return result


@app.get(
    "/jobs/<job_id>/logs",
    summary="Tail and follow the training logs",
    description="Read live from CloudWatch Logs while an attempt runs (its S3 copy once the stream is gone); "
    "next_token gives only what came after.",
    responses={
        **ok_response(JobLogs, "The tail of each attempt's log, or the lines after next_token."),
        **error_response(400, "next_token is not a cursor of this job's logs."),
        **error_response(404, "No such job or attempt."),
        **INVALID,
    },
)
def logs(
    job_id: JOB_ID,
    attempt: Annotated[int | None, Query(ge=1, le=10_000, description="Only this attempt.")] = None,
    tail: Annotated[
        int, Query(ge=1, le=5_000, description="Lines from the end of each log (without next_token).")
    ] = 200,
    next_token: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=4096,
            description="A cursor from an earlier answer: only the lines written since, across attempts.",
        ),
    ] = None,
) -> JobLogs:
    aws = ports_of(app)
    job = get_job(aws.store, job_id)
    return job_logs(
        job,
        objects=aws.objects,
        log_events=aws.log_events,
        jobs_bucket=aws.settings.jobs_bucket,
        attempt=attempt,
        tail=tail,
        next_token=next_token,
    )


_RESTORE_ERRORS = {**NOT_FOUND, **error_response(409, "The job has no archived model."), **INVALID}


@app.post(
    "/jobs/<job_id>/restore",
    summary="Restore the archived model from Glacier",
    description="Starts a restore of every archived object not yet readable (idempotent); GET reports progress.",
    responses={
        202: {
            "description": "Restores asked; where each object stands.",
            "content": {content_types.APPLICATION_JSON: {"model": RestoreReport}},
        },
        **_RESTORE_ERRORS,
    },
)
def restore(
    job_id: JOB_ID,
    days: Annotated[int, Query(ge=1, le=365, description="How long restored copies stay.")] = 7,
) -> Response[RestoreReport]:
    aws = ports_of(app)
    job = get_job(aws.store, job_id)
    report = start_restore(
        job, objects=aws.objects, archive_buckets=aws.settings.allowed_archive_buckets, days=days
    )
    return Response(202, content_types.APPLICATION_JSON, report)


@app.get(
    "/jobs/<job_id>/restore",
    summary="Report whether the archived model is readable",
    responses={**ok_response(RestoreReport, "Where each archived object stands."), **_RESTORE_ERRORS},
)
def restore_report(job_id: JOB_ID) -> RestoreReport:
    aws = ports_of(app)
    job = get_job(aws.store, job_id)
    return restore_status(job, objects=aws.objects, archive_buckets=aws.settings.allowed_archive_buckets)


# ----------------------------------------------------------------------------------------------- errors


app.include_router(schedules_router)
app.include_router(code_router)
app.include_router(plan_router)
app.include_router(telemetry_router)
register_error_handlers(app, logger)


# ----------------------------------------------------------------------------------------------- entry


@function_handler(RawInvocation)
def handler(invocation: RawInvocation, aws: Ports) -> dict[str, Any]:
    return answer(app, invocation, aws)
