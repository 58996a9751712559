"""Lambda: send a step (stage, train) to the agent on the job's instance, with the workflow's task token."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

from spotrun.aws.adapters import S3Objects, SsmCommands, job_store
from spotrun.aws.settings import Settings
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.model.command import StageResult, WorkflowStep
from spotrun.model.job import utc_now
from spotrun.model.timing import WorkflowTiming
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


class AgentStepRequest(BaseModel):
    job_id: str
    step: WorkflowStep
    task_token: str = Field(repr=False)
    timing: WorkflowTiming
    staged: StageResult | None = None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=AgentStepRequest)
def handler(event: AgentStepRequest, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    command_id = dispatch_agent_step(
        job_id=event.job_id,
        step=event.step,
        task_token=event.task_token,
        timing=event.timing,
        staged=event.staged,
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        objects=S3Objects(settings.region),
        commands=SsmCommands(settings.region),
        region=settings.region,
        jobs_bucket=settings.jobs_bucket,
        document_name=settings.agent_document_name,
        now=utc_now(),
    )
    # Never log the event itself: it carries the task token.
    logger.info("agent step sent", extra={"job_id": event.job_id, "step": event.step, "command": command_id})
    return {"command_id": command_id}
