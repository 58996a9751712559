"""Lambda: launch spot (or fallback on-demand) capacity for the job's next attempt."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.fleet import GroupSite
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now
from spotrun.model.timing import WorkflowTiming


class AcquireRequest(DeferredModel):
    job_id: str
    timing: WorkflowTiming


@function_handler(AcquireRequest)
def handler(request: AcquireRequest, aws: Ports) -> dict[str, Any]:
    attempt = acquire_instance(
        job_id=request.job_id,
        store=aws.store,
        compute=aws.compute,
        subnet_ids=aws.settings.subnet_ids,
        launch_template_name=aws.settings.launch_template_name,
        timing=request.timing,
        now=utc_now(),
        group=GroupSite.of(aws.settings),
    )
    logger.info("instance launched", extra={"job_id": request.job_id, **attempt.model_dump(mode="json")})
    metrics.add_dimension(name="Lifecycle", value=attempt.lifecycle)
    metrics.add_metric(name="InstancesLaunched", unit=MetricUnit.Count, value=len(attempt.instance_ids()))
    return attempt.model_dump(mode="json")
