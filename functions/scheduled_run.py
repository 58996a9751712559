"""Lambda: one firing of a schedule (EventBridge Scheduler target): start its job, or record a skip."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from spotrun.aws.adapters import S3Objects, StepFunctionsWorkflows, job_store
from spotrun.aws.schedules import DynamoRunRecords
from spotrun.aws.settings import Settings
from spotrun.control.schedules import Invocation, run_scheduled
from spotrun.model.job import utc_now
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=Invocation)
def handler(event: Invocation, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    run = run_scheduled(
        event,
        bucket=settings.jobs_bucket,
        objects=S3Objects(settings.region),
        records=DynamoRunRecords(settings.jobs_table, settings.region),
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        workflows=StepFunctionsWorkflows(settings.region),
        state_machine_arn=settings.state_machine_arn,
        time_scale=settings.time_scale,
        now=utc_now(),
    )
    metrics.add_metric(name=f"ScheduledRuns{run.outcome.capitalize()}", unit=MetricUnit.Count, value=1)
    logger.info("scheduled run", extra=run.model_dump(mode="json"))
    return run.model_dump(mode="json")
