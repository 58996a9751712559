"""Lambda: send a step (stage, train) to the agent on the job's instance; the task token stays in the job record."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from functions.runtime import logger, metrics, parse_event, ports, tracer
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.model.agent_protocol.command import StageResult, WorkflowStep
from spotrun.model.deferred import DeferredModel
from spotrun.model.job.record import utc_now
from spotrun.model.timing import WorkflowTiming


class AgentStepRequest(DeferredModel):
    job_id: str
    step: WorkflowStep
    task_token: str = Field(repr=False)
    timing: WorkflowTiming
    staged: StageResult | None = None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@parse_event(AgentStepRequest)
def handler(event: AgentStepRequest, context: LambdaContext) -> dict[str, Any]:
    aws = ports("agent_step")
    command_id = dispatch_agent_step(
        job_id=event.job_id,
        step=event.step,
        task_token=event.task_token,
        timing=event.timing,
        staged=event.staged,
        store=aws.store,
        objects=aws.objects,
        commands=aws.commands,
        region=aws.settings.region,
        jobs_bucket=aws.settings.jobs_bucket,
        document_name=aws.settings.agent_document_name,
        report_url=aws.settings.agent_report_url,
        now=utc_now(),
    )
    # Never log the event itself: it carries the task token.
    logger.info("agent step sent", extra={"job_id": event.job_id, "step": event.step, "command": command_id})
    return {"command_id": command_id}
