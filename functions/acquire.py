"""Lambda: launch spot (or fallback on-demand) capacity for the job's next attempt."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import logger, metrics, parse_event, ports, tracer
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.model.deferred import DeferredModel
from spotrun.model.job.record import utc_now
from spotrun.model.timing import WorkflowTiming


class AcquireRequest(DeferredModel):
    job_id: str
    timing: WorkflowTiming


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@parse_event(AcquireRequest)
def handler(event: AcquireRequest, context: LambdaContext) -> dict[str, Any]:
    aws = ports("acquire")
    attempt = acquire_instance(
        job_id=event.job_id,
        store=aws.store,
        compute=aws.compute,
        subnet_ids=aws.settings.subnet_ids,
        launch_template_name=aws.settings.launch_template_name,
        timing=event.timing,
        now=utc_now(),
    )
    logger.info("instance launched", extra={"job_id": event.job_id, **attempt.model_dump(mode="json")})
    metrics.add_dimension(name="Lifecycle", value=attempt.lifecycle)
    metrics.add_metric(name="InstancesLaunched", unit=MetricUnit.Count, value=1)
    return attempt.model_dump(mode="json")
