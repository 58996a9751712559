"""Waiting for capacity, against moto in process with the emulator's CreateFleet (per-pool errors as EC2 gives them).

The acquire, release and finalize handlers run as the workflow runs them; the API's view and the CLI's `status`
and `list` read the record through the API function.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from functions import acquire, finalize, interrupted, release
from spotrun.aws.adapters import job_store
from spotrun.cli import jobs as cli_jobs
from spotrun.cli.app import app
from spotrun.cli.client import SpotrunClient
from spotrun.local.capacity.catalog import Pool
from spotrun.local.capacity.pools import CapacityModel
from spotrun.local.patches import ec2
from spotrun.local.patches.reversible import PatchSet
from spotrun.model.errors import CapacityMaxWaitExceeded, CapacityUnavailable
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, utc_now
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.timing import workflow_timing
from tests.integration.api_client import call

runner = CliRunner()

# g4dn.xlarge in us-east-1a costs more on spot than on demand (the request's default maximum): SpotMaxPriceTooLow.
# Its pool in us-east-1b has no spot capacity, and every other candidate pool is not offered at all: both
# InsufficientInstanceCapacity, as EC2 answers.
PRICEY = ("g4dn.xlarge", "us-east-1a")
FULL = ("g4dn.xlarge", "us-east-1b")
POOLS = [Pool(*PRICEY, spot_price=0.9, capacity=4), Pool(*FULL, spot_price=0.2, capacity=0)]

MANIFEST = """
name: waits
resources: {{gpu_names: [t4, a10g]}}
training: {{command: [python, train.py]}}
outputs: {{model: model.npy}}
capacity: {{max_wait_minutes: {minutes}}}
"""


class _Instances:
    """The emulator's instance manager, reduced to capacity: a launch holds a slot, a termination frees it."""

    def __init__(self, capacity: CapacityModel) -> None:
        self.capacity = capacity

    def launched(self, model: Any, lifecycle: str) -> None:
        self.capacity.allocate(model.id, model.instance_type, model.placement.zone, lifecycle)  # type: ignore[arg-type]

    def terminated(self, model: Any) -> None:
        self.capacity.release(model.id)


@pytest.fixture
def capacity(deployment) -> Iterator[CapacityModel]:
    model = CapacityModel(POOLS)
    patches = PatchSet()
    ec2.install(patches, model, _Instances(model), threading.RLock())  # type: ignore[arg-type]
    yield model
    patches.undo_all()


def new_waiting_job(deployment, minutes: int = 60) -> str:
    manifest = parse_manifest_text(MANIFEST.format(minutes=minutes))
    job = new_job(
        "waits-000000000001", "waits", ManifestSource(bucket="b", key="k", etag="e"), manifest, utc_now()
    )
    assert job_store(deployment.jobs_table, deployment.region).create(job)
    return job.job_id


@contextmanager
def clock(monkeypatch, at: datetime) -> Iterator[None]:
    """The handlers' clock, set to ``at``."""
    for module in (acquire, release, finalize, interrupted):
        monkeypatch.setattr(module, "utc_now", lambda: at)
    yield


def acquire_at(monkeypatch, lambda_context, job_id: str, at: datetime, minutes: int = 60) -> dict[str, Any]:
    timing = workflow_timing(parse_manifest_text(MANIFEST.format(minutes=minutes)), 1.0).model_dump()
    with clock(monkeypatch, at):
        return acquire.handler({"job_id": job_id, "timing": timing}, lambda_context)  # type: ignore[no-any-return]


def stored(deployment, job_id):
    return job_store(deployment.jobs_table, deployment.region).get(job_id)


def shown(lambda_context, job_id: str) -> dict[str, Any]:
    answer = call(lambda_context, "GET", f"/jobs/{job_id}")
    assert answer.status == 200, answer.body
    return answer.body  # type: ignore[no-any-return]


class InProcessClient(SpotrunClient):
    """The CLI's client, answered by the API function in this process (moto behind it)."""

    def __init__(self, context: Any) -> None:
        super().__init__("http://in-process")
        self.context = context

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        query = "&".join(f"{k}={v}" for k, v in (kwargs.get("query") or {}).items() if v is not None)
        answer = call(self.context, method, path, kwargs.get("body"), query=query)
        assert answer.status == 200, answer.body
        return answer.body


def cli(monkeypatch, lambda_context, *argv: str) -> str:
    @contextmanager
    def in_process(target: Any) -> Iterator[SpotrunClient]:
        yield InProcessClient(lambda_context)

    monkeypatch.setattr(cli_jobs, "api_client", in_process)
    result = runner.invoke(app, list(argv))
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())  # rich wraps at its width: compare the words


def test_the_record_the_view_and_the_cli_show_each_pools_last_error_and_since_when(
    deployment, capacity, lambda_context, monkeypatch
):
    # Given a job no pool can serve, asked twice, 12 and 2 minutes ago
    job_id = new_waiting_job(deployment)
    began = utc_now().replace(microsecond=0) - timedelta(minutes=12)
    for at in (began, began + timedelta(minutes=10)):
        with pytest.raises(CapacityUnavailable):
            acquire_at(monkeypatch, lambda_context, job_id, at)

    # When the record, the API's view, `spotrun status` and `spotrun list` are read
    job = stored(deployment, job_id)
    view = shown(lambda_context, job_id)
    status = cli(monkeypatch, lambda_context, "status", job_id)
    listing = cli(monkeypatch, lambda_context, "list")

    # Then the record keeps since when it waits and, once per pool, the last error EC2 gave and when
    wait = job.capacity_wait
    assert wait is not None
    assert wait.since == began
    by_pool = {(e.instance_type, e.availability_zone): e for e in wait.pools}
    assert len(by_pool) == len(wait.pools) > 2  # every candidate pool, each once though asked twice
    assert by_pool[PRICEY].code == "SpotMaxPriceTooLow"
    assert "0.9" in by_pool[PRICEY].message
    assert by_pool[FULL].code == "InsufficientInstanceCapacity"
    assert {e.at for e in wait.pools} == {began + timedelta(minutes=10)}
    # And the timeline noted the wait once, not once per retry
    noted = [change for change in job.timeline if (change.detail or "").startswith("waiting for capacity")]
    assert len(noted) == 1
    assert noted[0].at == began
    assert job.status is JobStatus.ACQUIRING
    # And the view, status and list say it
    assert view["capacity_wait"]["since"].startswith(began.isoformat()[:19])
    assert "SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a" in view["capacity_wait"]["reasons_text"]
    expected = f"waiting for capacity since {began:%H:%M} UTC (12 min): "
    assert expected in status
    assert "SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a" in status
    assert "InsufficientInstanceCapacity in " in status
    assert "g4dn.xlarge/us-east-1b" in status
    assert "ACQUIRING (waiting)" in listing


def test_max_wait_ends_the_job_with_the_reasons_after_all_its_waits_and_releases_its_instances(
    deployment, capacity, lambda_context, monkeypatch
):
    # Given a job allowed 5 minutes of waiting, that waited 3 for its first instance and was then interrupted
    job_id = new_waiting_job(deployment, minutes=5)
    t0 = utc_now().replace(microsecond=0) - timedelta(minutes=30)
    with pytest.raises(CapacityUnavailable):
        acquire_at(monkeypatch, lambda_context, job_id, t0, minutes=5)
    capacity.set_capacity(*FULL, 1)
    first = acquire_at(monkeypatch, lambda_context, job_id, t0 + timedelta(minutes=3), minutes=5)
    # (a wait shorter than max_wait ends with the instance: its errors go, its 3 minutes count on)
    assert (first["instance_type"], first["availability_zone"]) == FULL
    job = stored(deployment, job_id)
    assert job.status is JobStatus.BOOTING
    assert job.capacity_wait is None
    assert job.capacity_waited_seconds == 180
    assert "after waiting 3.0 min for capacity" in (job.timeline[-1].detail or "")
    view = shown(lambda_context, job_id)
    assert view.get("capacity_wait") is None
    assert view["capacity_waited_seconds"] == 180
    capacity.set_capacity(*FULL, 0)
    interrupted_at = t0 + timedelta(minutes=20)
    with clock(monkeypatch, interrupted_at):
        interrupted.handler({"job_id": job_id, "error": {"Error": "Spot.Interrupted"}}, lambda_context)

    # When no pool serves it again, for 1 minute and then for 2 more (3 + 2 > 5, though this wait is 2 only)
    with pytest.raises(CapacityUnavailable):
        acquire_at(monkeypatch, lambda_context, job_id, interrupted_at, minutes=5)
    with pytest.raises(CapacityUnavailable):
        acquire_at(monkeypatch, lambda_context, job_id, interrupted_at + timedelta(minutes=1), minutes=5)
    with pytest.raises(CapacityMaxWaitExceeded) as raised:
        acquire_at(
            monkeypatch, lambda_context, job_id, interrupted_at + timedelta(minutes=2, seconds=1), minutes=5
        )
    # And the workflow fails it as its Catch does: release, then record the failure
    error = {
        "Error": type(raised.value).__name__,
        "Cause": json.dumps({"errorType": type(raised.value).__name__, "errorMessage": str(raised.value)}),
    }
    ended = interrupted_at + timedelta(minutes=2, seconds=2)
    with clock(monkeypatch, ended):
        release.handler({"job_id": job_id, "reason": "failed"}, lambda_context)
        finalize.handler({"job_id": job_id, "outcome": "FAILED", "error": error}, lambda_context)

    # Then it failed Capacity.MaxWaitExceeded, naming each pool's last error, and keeps the wait on its record
    job = stored(deployment, job_id)
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Capacity.MaxWaitExceeded"
    assert "max_wait_minutes (5 min)" in job.error.message
    assert "SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a" in job.error.message
    assert "InsufficientInstanceCapacity in " in job.error.message
    assert job.capacity_wait is not None
    assert job.capacity_wait.since == interrupted_at
    # And nothing it launched still runs, nor holds capacity
    ec2 = boto3.client("ec2")
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }
    assert states == {first["instance_id"]: "terminated"}
    assert capacity.used(*FULL) == 0
    # And `spotrun status` says how long it waited and why it ended
    status = cli(monkeypatch, lambda_context, "status", job_id)
    assert f"waited for capacity from {interrupted_at:%H:%M} UTC (2 min): " in status
    assert "FAILED (Capacity.MaxWaitExceeded)" in status
