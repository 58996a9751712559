"""Lambda: move a deadline job from on-demand back to spot, once EC2 has spot for it (asked by its heartbeat)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import logger, metrics, parse_event, ports, tracer
from spotrun.aws.events import ReturnToSpotEvent
from spotrun.control.capacity.spot_return import return_to_spot
from spotrun.model.job.record import utc_now


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@parse_event(ReturnToSpotEvent)
def handler(event: ReturnToSpotEvent, context: LambdaContext) -> dict[str, Any]:
    aws = ports("deadline_return")
    request = event.detail
    decision = return_to_spot(
        request,
        store=aws.store,
        compute=aws.compute,
        objects=aws.objects,
        commands=aws.commands,
        settings=aws.settings,
        now=utc_now(),
    )
    moved = decision is not None and decision.choice.value == "spot"
    outcome = {
        "job_id": request.job_id,
        "attempt": request.attempt,
        "choice": None if decision is None else decision.choice.value,
        "moved": moved,
    }
    logger.info("return to spot handled", extra=outcome)
    if moved:
        metrics.add_metric(name="DeadlineReturnsToSpot", unit=MetricUnit.Count, value=1)
    return outcome
