"""The API's schedule routes (a Powertools Router included by :mod:`functions.api.app`): scheduled retraining.

Each route imports the schedules' use cases (:mod:`spotrun.control.schedules.firing`, which carries the submission and
the deadline policy a firing starts a job with) when it is first called: a cold start of the API that serves no
schedule route does not load them. The answers' models are imported here, for Powertools to validate against.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from functions.api.errors import error_response, ok_response
from functions.api.examples import example
from functions.api.gate import ports_of
from spotrun.control.schedules.run_records import RunRecord
from spotrun.control.schedules.view import ScheduleView
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now
from spotrun.model.manifest.schema import JobManifest

router = Router()

EXAMPLE = {
    "name": "tiny-regression",
    "resources": {"gpu_names": ["t4", "a10g"]},
    "training": {"command": ["python", "train.py"]},
    "schedule": {"expression": "cron(0 3 ? * MON-FRI *)", "timezone": "UTC", "only_if_data_changed": True},
}
NAME = Annotated[str, Path(pattern=r"^[a-z0-9-]{1,64}$", description="The schedule's name (the manifest's).")]
NOT_FOUND = error_response(404, "No schedule has that name.")
INVALID = error_response(422, "The manifest or the parameter fails validation; errors names each problem.")


class ScheduleList(DeferredModel):
    """Every schedule of the deployment."""

    schedules: list[ScheduleView]


class ScheduleRuns(DeferredModel):
    """A schedule's firings, newest first: the job each started, or why it was skipped."""

    name: str
    runs: list[RunRecord]


@router.post(
    "/schedules",
    summary="Create a schedule",
    description="Runs the manifest on its `schedule` (cron or rate, as EventBridge Scheduler takes them); each "
    "firing is a new job. With only_if_data_changed a firing is skipped (and recorded) when the inputs are "
    "unchanged since the last successful run.",
    responses={
        **ok_response(ScheduleView, "The schedule is created.", status=201),
        **error_response(400, "The body is not JSON (or not UTF-8 text)."),
        **error_response(409, "A schedule of that name exists."),
        **error_response(415, "The body is not sent as JSON (Content-Type: application/json)."),
        **INVALID,
    },
)
def create(
    manifest: Annotated[
        JobManifest,
        Body(
            description="A job manifest with a `schedule`.",
            openapi_examples={"nightly": example("Weekdays at 03:00", value=EXAMPLE)},
        ),
    ],
) -> Response[ScheduleView]:
    from spotrun.control.schedules.firing import create_schedule  # at first use: see the module's docstring

    aws = ports_of(router)
    view = create_schedule(
        manifest,
        schedules=aws.schedules,
        objects=aws.objects,
        bucket=aws.settings.jobs_bucket,
        archive_buckets=aws.settings.allowed_archive_buckets,
        secret_references=aws.settings.reference_patterns,
        now=utc_now(),
    )
    return Response(201, content_types.APPLICATION_JSON, view)


@router.get(
    "/schedules",
    summary="List schedules",
    responses={**ok_response(ScheduleList, "Every schedule."), **INVALID},
)
def list_() -> ScheduleList:
    from spotrun.control.schedules.firing import list_schedules  # at first use: see the module's docstring

    return ScheduleList(schedules=list_schedules(ports_of(router).schedules, utc_now()))


@router.delete(
    "/schedules/<name>",
    summary="Delete a schedule",
    description="No further firings; the runs recorded so far stay.",
    # No body: "content" given empty, or Powertools would document the None return as a JSON null.
    responses={204: {"description": "The schedule is deleted.", "content": {}}, **NOT_FOUND, **INVALID},
)
def delete(name: NAME) -> Response[None]:
    from spotrun.control.schedules.firing import delete_schedule  # at first use: see the module's docstring

    delete_schedule(name, ports_of(router).schedules)
    return Response(204)


@router.get(
    "/schedules/<name>/runs",
    summary="List a schedule's runs and skips",
    responses={**ok_response(ScheduleRuns, "The schedule's firings, newest first."), **NOT_FOUND, **INVALID},
)
def runs(name: NAME) -> ScheduleRuns:
    from spotrun.control.schedules.firing import schedule_runs  # at first use: see the module's docstring

    aws = ports_of(router)
    return ScheduleRuns(name=name, runs=schedule_runs(name, aws.schedules, aws.run_records))
