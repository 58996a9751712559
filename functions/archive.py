"""Lambda: archive the trained model in the manifest's Glacier storage class."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.control.archive import archive_model
from spotrun.model.agent_protocol.command import TrainResult
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now


class ArchiveRequest(DeferredModel):
    job_id: str
    trained: TrainResult


@function_handler(ArchiveRequest)
def handler(request: ArchiveRequest, aws: Ports) -> dict[str, Any]:
    archived = archive_model(
        job_id=request.job_id,
        trained=request.trained,
        store=aws.store,
        objects=aws.objects,
        jobs_bucket=aws.settings.jobs_bucket,
        archive_bucket=aws.settings.archive_bucket,
        now=utc_now(),
    )
    metrics.add_metric(name="ArchivedBytes", unit=MetricUnit.Bytes, value=sum(item.size for item in archived))
    logger.info("model archived", extra={"job_id": request.job_id, "objects": len(archived)})
    # A count, not the list: the result enters the workflow state, which Step Functions caps at 256 KiB.
    return {"objects": len(archived), "bytes": sum(item.size for item in archived)}
