"""The API's agent route (a Powertools Router included by :mod:`functions.api.app`): instances report steps.

The caller's identity is API Gateway's, never the body's: with IAM authorization API Gateway verifies the
SigV4 signature and puts the effective caller in ``requestContext.identity.userArn`` (``$context.identity.
userArn``, "the ARN of the effective user identified after authentication";
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-mapping-template-reference.html).
The decisions are :func:`spotrun.control.agent_reports.answer_agent_report` and
:func:`spotrun.control.job_credentials.issue_job_credentials` (the agent's S3 credentials for its own job).
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from functions.api.errors import ApiError, error_response, ok_response, refusal
from functions.api.gate import ports_of
from functions.runtime import Ports, logger
from spotrun.control.agent_reports import (
    AgentReport,
    CallerIdentity,
    ReportAnswer,
    ReportInvalid,
    ReportNotWaited,
    ReportRefused,
    TaskGone,
    answer_agent_report,
)
from spotrun.control.capacity.deadline_moves import redecide_while_training
from spotrun.control.job_credentials import CredentialsRequest, issue_job_credentials
from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH, AGENT_REPORTS_PATH
from spotrun.model.agent_protocol.session_policy import JobAccessRefused, JobCredentials
from spotrun.model.job.gpu_health import GPU_SAMPLE_REFRESH_SECONDS
from spotrun.model.job.record import utc_now

router = Router()


@router.post(
    AGENT_REPORTS_PATH,
    summary="Report an agent step (instances only)",
    description="The agent on a job's instance reports a heartbeat, the success or the failure of the step the "
    "workflow waits on; the control plane answers the workflow. Only the instance of the job's open attempt, "
    "signing with the deployment's instance role, is heard.",
    responses={
        **ok_response(ReportAnswer, "The workflow took the report."),
        **error_response(400, "The body is not JSON (or not UTF-8 text)."),
        **error_response(413, "The body is larger than the API takes."),
        **error_response(415, "The body is not sent as JSON (Content-Type: application/json)."),
        **error_response(403, "The caller is not the instance of the job's open attempt."),
        **error_response(409, "The job does not wait on this step of this attempt."),
        **error_response(410, "The workflow no longer waits for this task."),
        **error_response(422, "The report fails validation; errors names each problem."),
    },
)
def report(report: Annotated[AgentReport, Body(description="What the agent reports.")]) -> ReportAnswer:
    identity = _caller()
    aws = ports_of(router)
    answer = answer_agent_report(
        report.root,
        identity=identity,
        instance_role_name=aws.settings.instance_role_name,
        store=aws.store,
        workflows=aws.workflows,
        gpu_refresh_seconds=GPU_SAMPLE_REFRESH_SECONDS * aws.settings.time_scale,
    )
    logger.info("agent report answered", extra=answer.model_dump())
    if report.root.kind == "heartbeat" and report.root.step == "train":
        _redecide(report.root.job_id, aws)
    return answer


def _redecide(job_id: str, aws: Ports) -> None:
    # A deadline job training is decided again at each heartbeat (control.deadline_moves). The
    # heartbeat itself was answered: a failure here is logged, never the agent's problem.
    try:
        decision = redecide_while_training(
            job_id,
            store=aws.store,
            objects=aws.objects,
            commands=aws.commands,
            events=aws.events,
            settings=aws.settings,
            now=utc_now(),
        )
    except Exception:
        logger.exception("could not decide again for the deadline of job %s", job_id)
        return
    if decision is not None:
        logger.info(
            "deadline decision",
            extra={"job_id": job_id, "choice": decision.choice.value, "slack_hours": decision.slack_hours},
        )


@router.post(
    AGENT_CREDENTIALS_PATH,
    summary="S3 credentials for the caller's own job (instances only)",
    description="The agent on a job's instance gets temporary credentials (at most one hour; it asks again "
    "before they expire) that reach only that job's objects, inputs and code: a session of the job-access "
    "role with the job's session policy. Only the instance of the job's open attempt, signing with the "
    "deployment's instance role, is answered.",
    responses={
        **ok_response(JobCredentials, "Credentials for the job's attempt: secret, never to be logged."),
        **error_response(400, "The body is not JSON (or not UTF-8 text)."),
        **error_response(413, "The body is larger than the API takes."),
        **error_response(415, "The body is not sent as JSON (Content-Type: application/json)."),
        **error_response(403, "The caller is not the instance of the job's open attempt."),
        **error_response(409, "The job's open attempt is another one."),
        **error_response(
            422,
            "The request fails validation, or the job's manifest cannot be scoped to it (errors says why).",
        ),
    },
)
def credentials(
    request: Annotated[CredentialsRequest, Body(description="The job and attempt the agent runs.")],
) -> JobCredentials:
    aws = ports_of(router)
    issued = issue_job_credentials(
        request,
        identity=_caller(),
        instance_role_name=aws.settings.instance_role_name,
        jobs_bucket=aws.settings.jobs_bucket,
        # arn:<partition>:iam::<account>:role/<name>
        partition=aws.settings.job_access_role_arn.split(":")[1],
        store=aws.store,
        access=aws.job_access,
        logs=aws.log_events,
    )
    # Who got what, never the secret.
    logger.info(
        "job credentials issued",
        extra={
            "job_id": request.job_id,
            "attempt": request.attempt,
            "expiration": issued.expiration.isoformat(),
        },
    )
    return issued


def _caller() -> CallerIdentity:
    # The REST proxy event (this router is included by an APIGatewayRestResolver).
    event = APIGatewayProxyEvent(router.current_event.raw_event)
    return CallerIdentity(
        user_arn=event.request_context.identity.user_arn,
        account_id=event.request_context.account_id,
    )


_STATUS: dict[type[Exception], int] = {
    ReportRefused: 403,
    ReportNotWaited: 409,
    TaskGone: 410,
    ReportInvalid: 422,
    JobAccessRefused: 422,
}


@router.exception_handler([ReportRefused, ReportNotWaited, TaskGone, ReportInvalid, JobAccessRefused])
def _refused(exc: Exception) -> Response[ApiError]:
    status = _STATUS[type(exc)]
    if status == 403:
        logger.warning("agent request refused", extra={"reason": str(exc)})
    return refusal(status, str(exc))
