"""Lambda: one firing of a schedule (EventBridge Scheduler target): start its job, or record a skip."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.control.schedules.firing import Invocation, run_scheduled
from spotrun.model.job.record import utc_now


@function_handler(Invocation)
def handler(event: Invocation, aws: Ports) -> dict[str, Any]:
    run = run_scheduled(
        event,
        bucket=aws.settings.jobs_bucket,
        objects=aws.objects,
        records=aws.run_records,
        store=aws.store,
        workflows=aws.workflows,
        state_machine_arn=aws.settings.state_machine_arn,
        time_scale=aws.settings.time_scale,
        now=utc_now(),
    )
    metrics.add_metric(name=f"ScheduledRuns{run.outcome.capitalize()}", unit=MetricUnit.Count, value=1)
    logger.info("scheduled run", extra=run.model_dump(mode="json"))
    return run.model_dump(mode="json")
