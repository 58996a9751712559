"""What the agent route's tests share: a runtime whose workflow parks on a task token, and a job on an instance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from spotrun.aws.adapters import job_store
from spotrun.local.iam.roles import INSTANCE_ROLE_NAME
from spotrun.local.instances.imds import RoleCredentials
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.model.manifest.schema import JobManifest
from spotrun.shape import SHAPE, DeploymentShape, FunctionSpec

SHAPE_UNDER_TEST = DeploymentShape(
    functions=(
        FunctionSpec("park", "fixtures_handlers.park", "Keeps the task token."),
        SHAPE.function("api"),
        SHAPE.function("agent_api"),
    ),
    tables=SHAPE.tables,
    buckets=SHAPE.buckets,
    rules=(),
    state_machine_functions={"ParkArn": "park"},
    api_routes=SHAPE.api_routes,
)
ASL = {
    "StartAt": "Park",
    "States": {
        "Park": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {
                "FunctionName": "${ParkArn}",
                "Payload": {"token.$": "$$.Task.Token", "key.$": "$.key"},
            },
            "HeartbeatSeconds": 600,  # as the job workflow's agent steps: heartbeats are awaited
            "End": True,
        }
    },
}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module", name="runtime")
def agent_route_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("agent-route")
    asl = workdir / "test.asl.json"
    asl.write_text(json.dumps(ASL))
    # The api function reads its declared settings; the scheduling ones are unused here.
    unused = {"schedule_group": "unused", "scheduler_role_arn": "unused", "scheduled_run_arn": "unused"}
    with LocalRuntime(
        workdir, time_scale=0.01, shape=SHAPE_UNDER_TEST, state_machine_file=asl, settings_overrides=unused
    ) as started:
        yield started


def job_on_instance(
    runtime: LocalRuntime,
    job_id: str,
    instance_id: str,
    *,
    status: JobStatus,
    manifest: JobManifest | None = None,
    task_token: str | None = None,
) -> RoleCredentials:
    """Record a job whose attempt 1 runs on ``instance_id``, and register that instance's session; return it."""
    attempt = Attempt(
        number=1,
        instance_id=instance_id,
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.3,
        started_at=NOW,
    )
    job = Job(
        job_id=job_id,
        name=manifest.name if manifest is not None else job_id,
        status=status,
        source=ManifestSource(),
        manifest=manifest,
        created_at=NOW,
        updated_at=NOW,
        attempts=[attempt],
        task_token=task_token,
    )
    assert job_store(runtime.settings.jobs_table, runtime.region).create(job)
    credentials = RoleCredentials.issue(INSTANCE_ROLE_NAME)
    runtime.callers.register_instance(instance_id, credentials)
    return credentials
