"""Lambda: is the job's instance running, and its SSM agent online, yet?"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from spotrun.aws.adapters import Ec2Compute, SsmCommands, job_store
from spotrun.aws.settings import Settings
from spotrun.control.readiness import check_ready
from spotrun.model.job import utc_now
from spotrun.model.timing import WorkflowTiming
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


class ReadyRequest(BaseModel):
    job_id: str
    timing: WorkflowTiming


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=ReadyRequest)
def handler(event: ReadyRequest, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    report = check_ready(
        job_id=event.job_id,
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        compute=Ec2Compute(settings.region),
        commands=SsmCommands(settings.region),
        timing=event.timing,
        now=utc_now(),
    )
    logger.info("instance state", extra={"job_id": event.job_id, **report.model_dump()})
    return report.model_dump(mode="json")
