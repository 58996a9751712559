"""A release EC2 answers NotFound for bills its instances until EC2 confirms their termination.

TerminateInstances answering NotFound just after a launch proves nothing (EC2 is eventually consistent,
https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html): the instance may run, and EC2 bills
it, until a retried terminate is accepted.
"""

from datetime import UTC, datetime, timedelta

import pytest

from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.release import release_for_workflow
from spotrun.control.capacity.standby import launch_standby
from spotrun.control.finalize import finalize_job
from spotrun.control.store import update_job
from spotrun.model.errors import InstancesNotReleased
from spotrun.model.job.limits import spent_usd
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCompute, InMemoryJobStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SUBNETS = ("subnet-a", "subnet-b")
MANIFEST = parse_manifest_text(
    "name: tiny\nresources: {gpu_names: [t4]}\ntraining: {command: [python, t.py]}\nbudget: {max_usd: 100}\n"
)
TIMING = workflow_timing(MANIFEST, 1.0)
PRICE = 0.2  # FakeCompute's spot price, USD per hour


@pytest.fixture
def training():
    store, compute = InMemoryJobStore(), FakeCompute(price=PRICE)
    store.create(new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k", etag="e"), MANIFEST, T0))
    attempt = acquire_instance(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=SUBNETS,
        launch_template_name="spotrun-agent",
        timing=TIMING,
        now=T0,
    )
    compute.states[attempt.instance_id] = "running"
    for status in (JobStatus.STAGING, JobStatus.TRAINING):
        update_job(store, "tiny-1", lambda current, status=status: transition(current, status, T0))
    return store, compute, attempt.instance_id


def release(store, compute, at):
    return release_for_workflow(job_id="tiny-1", reason="failed", store=store, compute=compute, now=at)


def test_an_instance_is_billed_until_ec2_confirms_its_termination(training):
    # Given a training job whose instance EC2 answers NotFound for (it launched moments ago, and runs)
    store, compute, instance_id = training
    compute.invisible.add(instance_id)
    # When the workflow's release is answered NotFound twice, and the third try is accepted
    for seconds in (30, 90):
        with pytest.raises(InstancesNotReleased):
            release(store, compute, T0 + timedelta(seconds=seconds))
        # Then meanwhile the attempt is billed up to the latest try, not to the first NotFound
        assert store.get("tiny-1").attempts[0].ended_at == T0 + timedelta(seconds=seconds)
    compute.invisible.clear()
    confirmed = T0 + timedelta(seconds=210)
    assert release(store, compute, confirmed) == [instance_id]
    # Then the attempt ended when EC2 confirmed, with the reason of the first release
    attempt = store.get("tiny-1").attempts[0]
    assert (attempt.ended_at, attempt.end_reason) == (confirmed, "failed")
    # And the job's cost and budget count 210 s of the instance, even when finalized later
    final = finalize_job(
        job_id="tiny-1", outcome="FAILED", error=None, store=store, now=confirmed + timedelta(minutes=5)
    )
    expected = PRICE * 210 / 3600
    assert final.cost is not None
    assert final.cost.usd == pytest.approx(expected, abs=1e-4)
    assert spent_usd(final, confirmed + timedelta(minutes=5)) == pytest.approx(expected, abs=1e-4)


def test_a_confirmed_release_moves_no_end_on_a_later_call(training):
    # Given a job whose release EC2 accepted at once
    store, compute, _instance_id = training
    release(store, compute, T0 + timedelta(seconds=30))
    # When the release runs again later (it runs on every path out of the workflow)
    release(store, compute, T0 + timedelta(seconds=300))
    # Then the instance is billed up to its confirmed termination only
    assert store.get("tiny-1").attempts[0].ended_at == T0 + timedelta(seconds=30)


def test_an_unused_standby_is_billed_until_ec2_confirms_its_termination(training):
    # Given a training job with a standby, launched on a warning, that EC2 does not show yet
    store, compute, _instance_id = training
    standby = launch_standby(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=SUBNETS,
        launch_template_name="spotrun-agent",
        now=T0 + timedelta(seconds=10),
    )
    assert standby is not None
    compute.invisible.add(standby.instance_id)
    # When the release is answered NotFound for it once, then accepted
    with pytest.raises(InstancesNotReleased, match=standby.instance_id):
        release(store, compute, T0 + timedelta(seconds=40))
    compute.invisible.clear()
    release(store, compute, T0 + timedelta(seconds=100))
    # Then the unused standby is billed to the confirmation, the attempt to its own accepted termination
    job = store.get("tiny-1")
    assert [(kept.instance_id, kept.ended_at) for kept in job.unused_instances] == [
        (standby.instance_id, T0 + timedelta(seconds=100))
    ]
    assert job.attempts[0].ended_at == T0 + timedelta(seconds=40)
