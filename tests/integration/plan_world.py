"""What the plan-order tests share: the plan of a manifest in the emulator's EC2, at a fixed time."""

from __future__ import annotations

from datetime import UTC, datetime

from spotrun.aws.adapters import Ec2Compute
from spotrun.aws.objects import S3Objects
from spotrun.control.views.plan import plan_job
from spotrun.control.views.plan_model import JobPlan
from spotrun.local.runtime import LocalRuntime
from spotrun.model.manifest.schema import JobManifest

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def plan_in(runtime: LocalRuntime, manifest: JobManifest) -> JobPlan:
    """The plan of ``manifest`` at :data:`NOW` against ``runtime``'s EC2 and S3, on AWS's clock."""
    settings = runtime.settings
    return plan_job(
        manifest,
        compute=Ec2Compute(settings.region),
        objects=S3Objects(settings.region),
        subnet_ids=settings.subnet_ids,
        archive_buckets=(),
        jobs_bucket=settings.jobs_bucket,
        now=NOW,
        time_scale=1.0,
    )
