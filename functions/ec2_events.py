"""Lambda: EC2 spot interruption warnings, rebalance recommendations and instance state changes."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.aws.events import Ec2InstanceEvent
from spotrun.control.capacity.ec2_events import (
    on_instance_state,
    on_interruption_warning,
    on_rebalance_recommendation,
)
from spotrun.model.capacity.ec2_states import REBALANCE, SPOT_WARNING
from spotrun.model.job.record import utc_now


@function_handler(Ec2InstanceEvent)
def handler(event: Ec2InstanceEvent, aws: Ports) -> dict[str, Any]:
    store = aws.store
    instance_id = event.detail.instance_id
    if event.detail_type == SPOT_WARNING:
        outcome = on_interruption_warning(
            instance_id=instance_id,
            store=store,
            # EC2 and SSM in the region the event names; the job's documents in the deployment's bucket.
            compute=aws.in_region(event.region).compute,
            objects=aws.objects,
            commands=aws.in_region(event.region).commands,
            settings=aws.settings,
            now=utc_now(),
        )
    elif event.detail_type == REBALANCE:
        outcome = on_rebalance_recommendation(instance_id=instance_id, store=store, now=utc_now())
    else:
        outcome = on_instance_state(
            instance_id=instance_id,
            state=event.detail.state or "",
            store=store,
            workflows=aws.workflows,
            now=utc_now(),
        )
    logger.info("EC2 event handled", extra={"detail_type": event.detail_type, **outcome.model_dump()})
    if outcome.job_id is not None:
        metrics.add_metric(name="InstanceEventsActedOn", unit=MetricUnit.Count, value=1)
    return outcome.model_dump(mode="json")
