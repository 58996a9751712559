"""Lambda: move a deadline job from on-demand back to spot, once EC2 has spot for it (asked by its heartbeat)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.aws.events import ReturnToSpotEvent
from spotrun.control.capacity.spot_return import return_to_spot
from spotrun.model.job.record import utc_now


@function_handler(ReturnToSpotEvent)
def handler(event: ReturnToSpotEvent, aws: Ports) -> dict[str, Any]:
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
