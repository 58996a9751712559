"""Lambda: EC2 spot interruption warnings, rebalance recommendations and instance state changes."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from spotrun.aws.adapters import Ec2Compute, S3Objects, SsmCommands, StepFunctionsWorkflows, job_store
from spotrun.aws.events import Ec2InstanceEvent
from spotrun.aws.settings import Settings
from spotrun.control.interruptions import (
    on_instance_state,
    on_interruption_warning,
    on_rebalance_recommendation,
)
from spotrun.model.ec2 import REBALANCE, SPOT_WARNING
from spotrun.model.job import utc_now
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=Ec2InstanceEvent)
def handler(event: Ec2InstanceEvent, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    store = job_store(settings.jobs_table, settings.region, settings.event_bus_name)
    instance_id = event.detail.instance_id
    if event.detail_type == SPOT_WARNING:
        outcome = on_interruption_warning(
            instance_id=instance_id,
            store=store,
            compute=Ec2Compute(event.region),
            objects=S3Objects(settings.region),
            commands=SsmCommands(event.region),
            settings=settings,
            now=utc_now(),
        )
    elif event.detail_type == REBALANCE:
        outcome = on_rebalance_recommendation(instance_id=instance_id, store=store, now=utc_now())
    else:
        outcome = on_instance_state(
            instance_id=instance_id,
            state=event.detail.state or "",
            store=store,
            workflows=StepFunctionsWorkflows(settings.region),
            now=utc_now(),
        )
    logger.info("EC2 event handled", extra={"detail_type": event.detail_type, **outcome.model_dump()})
    if outcome.job_id is not None:
        metrics.add_metric(name="InstanceEventsActedOn", unit=MetricUnit.Count, value=1)
    return outcome.model_dump(mode="json")
