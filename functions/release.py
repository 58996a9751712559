"""Lambda: terminate every instance of the job (on success and on every failure path)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from spotrun.aws.adapters import Ec2Compute, job_store
from spotrun.aws.settings import Settings
from spotrun.control.instances import release_for_workflow
from spotrun.model.job import utc_now
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


class ReleaseRequest(BaseModel):
    job_id: str
    reason: str


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=ReleaseRequest)
def handler(event: ReleaseRequest, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    terminated = release_for_workflow(
        job_id=event.job_id,
        reason=event.reason,
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        compute=Ec2Compute(settings.region),
        now=utc_now(),
    )
    logger.info(
        "capacity released", extra={"job_id": event.job_id, "instances": terminated, "reason": event.reason}
    )
    return {"terminated": terminated}
