"""The API's agent route (a Powertools Router included by :mod:`functions.api.app`): instances report steps.

The caller's identity is API Gateway's, never the body's: with IAM authorization API Gateway verifies the
SigV4 signature and puts the effective caller in ``requestContext.identity.userArn`` (``$context.identity.
userArn``, "the ARN of the effective user identified after authentication";
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-mapping-template-reference.html).
The decision is :func:`spotrun.control.agent_reports.answer_agent_report`.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from functions.api.errors import ApiError, error_response, ok_response, refusal
from functions.runtime import logger, ports
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
from spotrun.model.command import AGENT_REPORTS_PATH

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
    # The REST proxy event (this router is included by an APIGatewayRestResolver).
    event = APIGatewayProxyEvent(router.current_event.raw_event)
    identity = CallerIdentity(
        user_arn=event.request_context.identity.user_arn,
        account_id=event.request_context.account_id,
    )
    aws = ports("api")
    answer = answer_agent_report(
        report.root,
        identity=identity,
        instance_role_name=aws.settings.instance_role_name,
        store=aws.store,
        workflows=aws.workflows,
    )
    logger.info("agent report answered", extra=answer.model_dump())
    return answer


_STATUS: dict[type[Exception], int] = {
    ReportRefused: 403,
    ReportNotWaited: 409,
    TaskGone: 410,
    ReportInvalid: 422,
}


@router.exception_handler([ReportRefused, ReportNotWaited, TaskGone, ReportInvalid])
def _refused(exc: Exception) -> Response[ApiError]:
    status = _STATUS[type(exc)]
    if status == 403:
        logger.warning("agent report refused", extra={"reason": str(exc)})
    return refusal(status, str(exc))
