"""The idle policy in the control plane: the train command's watch, and Training.Idle failing or relaunching the job."""

from __future__ import annotations

import json

import pytest

from spotrun.control.capacity.interruptions import record_interruption
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.control.finalize import finalize_job
from spotrun.model.agent_protocol.command import GpuIdleWatch
from spotrun.model.errors import InterruptionsExceeded
from spotrun.model.job.attempt import END_IDLE, END_KEPT
from spotrun.model.job.record import JobStatus
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.manifest.schema import JobManifest
from spotrun.model.timing import workflow_timing
from tests.unit.group_world import BUCKET, JOB_ID, SETTINGS, GroupWorld, later

ONE_NODE = "name: ddp\nresources: {gpu_names: [a10g]}\ncapacity: {max_interruptions: 1}\n"
TWO_NODES = "name: ddp\nresources: {gpu_names: [a10g], nodes: 2}\ncapacity: {max_interruptions: 3}\n"


def manifest(head: str, gpu_idle: str, command: str = "[python, train.py]") -> JobManifest:
    return parse_manifest_text(f"{head}training: {{command: {command}, gpu_idle: {gpu_idle}}}\n")


def one_node(action: str) -> JobManifest:
    return manifest(ONE_NODE, f"{{minutes: 5, action: {action}}}")


def idle_error(node: int = 0, utilization_max: float = 3.0) -> dict[str, str]:
    """What the Catch puts in the state when an agent reports Training.Idle."""
    cause = {
        "message": "GPU utilization stayed below 10 % for 300 s",
        "last_step": 120,
        "node": node,
        "seconds": 300.0,
        "utilization_max": utilization_max,
    }
    return {"Error": "Training.Idle", "Cause": json.dumps(cause)}


def record(world: GroupWorld, error: dict[str, str], minutes: float = 30.0):
    return record_interruption(
        job_id=JOB_ID,
        error=error,
        store=world.store,
        compute=world.compute,
        objects=world.objects,
        jobs_bucket=BUCKET,
        now=later(minutes),
    )


def test_the_train_command_carries_the_watch_time_scaled_and_the_stage_command_none() -> None:
    # Given a job whose manifest idles out below 15 % for 5 minutes, in the emulator at a time scale of 0.02
    world = GroupWorld(manifest(ONE_NODE, "{utilization_below: 15, minutes: 5}"))
    world.acquire()
    assert world.ready()
    timing = workflow_timing(world.job().require_manifest(), 0.02)
    sent = []
    # When its stage and train steps are sent
    for step in ("stage", "train"):
        before = len(world.commands.sent)
        dispatch_agent_step(
            job_id=JOB_ID,
            step=step,
            task_token=f"token-{step}",
            timing=timing,
            staged=None,
            store=world.store,
            objects=world.objects,
            commands=world.commands,
            settings=SETTINGS,
            now=later(1),
        )
        sent.append(world.command(world.commands.sent[before][2]))
    stage, train = sent
    # Then only training watches the GPUs, for 5 minutes scaled (6 s), and both put telemetry every second
    assert stage.gpu_idle is None
    assert train.gpu_idle is not None
    assert train.gpu_idle.utilization_below == 15.0
    assert train.gpu_idle.seconds == pytest.approx(6.0)
    assert train.telemetry_seconds == stage.telemetry_seconds == 1.0


def test_on_aws_the_watch_is_the_manifests_minutes_and_telemetry_every_30_s() -> None:
    # Given the same manifest on AWS (time scale 1)
    world = GroupWorld(manifest(ONE_NODE, "{minutes: 5}"))
    world.training()
    # When the train command was sent
    [train] = [world.command(uri) for _, _, uri in world.commands.sent if "train" in uri]
    # Then it watches for 300 s below the default 10 %, and puts telemetry every 30 s
    assert train.gpu_idle == GpuIdleWatch(utilization_below=10.0, seconds=300.0)
    assert train.telemetry_seconds == 30.0


def test_without_a_policy_the_train_command_has_no_watch() -> None:
    # Given a manifest without training.gpu_idle
    world = GroupWorld(parse_manifest_text(ONE_NODE + "training: {command: [python, train.py]}\n"))
    world.training()
    # When the train command was sent
    [train] = [world.command(uri) for _, _, uri in world.commands.sent if "train" in uri]
    # Then it has no idle watch
    assert train.gpu_idle is None


def test_action_fail_fails_the_job_with_training_idle_and_says_which_gpus_idled() -> None:
    # Given a one-node job training under gpu_idle action fail
    world = GroupWorld(one_node("fail"))
    attempt = world.training()
    error = idle_error(utilization_max=3.0)
    # When its agent reports Training.Idle
    recorded = record(world, error)
    # Then nothing is recorded as an interruption: the workflow fails the job with the step's own error
    assert recorded.failed
    assert world.job().current_attempt.ended_at is None
    assert world.job().interruptions == 0
    # When the failure path records it (after releasing the instances)
    job = finalize_job(job_id=JOB_ID, outcome="FAILED", error=error, store=world.store, now=later(31))
    # Then the job failed with Training.Idle, its message naming the threshold, the minutes and what followed
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Training.Idle"
    assert job.error.message == (
        "the GPUs stayed below 10 % utilization for 5 minutes (highest reading 3 %): training.gpu_idle stopped "
        "the command; action fail: the job fails and its instances are released"
    )
    assert attempt.instance_id in world.job().instance_ids()


def test_action_relaunch_ends_the_attempt_idle_terminates_its_instance_and_launches_another() -> None:
    # Given a one-node job training under gpu_idle action relaunch
    world = GroupWorld(one_node("relaunch"))
    attempt = world.training()
    # When its agent reports Training.Idle
    recorded = record(world, idle_error())
    # Then the attempt ended "idle", counted as a restart, and its idle instance was terminated
    assert not recorded.failed
    assert recorded.reason == END_IDLE
    first = world.job().attempts[0]
    assert first.end_reason == END_IDLE
    assert first.last_step == 120
    assert world.compute.states[attempt.instance_id] == "terminated"
    assert world.job().interruptions == 1
    assert world.job().status is JobStatus.INTERRUPTED
    assert "stayed below 10 % utilization for 5 minutes" in world.job().timeline[-1].detail
    # When capacity is acquired again
    second = world.acquire(later(31))
    # Then a new instance runs the next attempt, in the same pool if it likes (idle is no reclaim)
    assert second.number == 2
    assert second.instance_id != attempt.instance_id


def test_relaunches_past_max_interruptions_end_the_job() -> None:
    # Given a job that tolerates one restart, already relaunched once for idling
    world = GroupWorld(one_node("relaunch"))
    world.training()
    record(world, idle_error())
    world.acquire(later(31))
    assert world.ready(later(31))
    world.dispatch("stage", later(32))
    world.dispatch("train", later(32))
    # When its GPUs idle again
    # Then the second restart is one more than the manifest allows
    with pytest.raises(
        InterruptionsExceeded,
        match=r"interrupted 2 times \(.*the last: idle\); capacity.max_interruptions allows 1",
    ):
        record(world, idle_error(), minutes=60)


def test_in_a_group_the_idle_node_is_terminated_and_its_peer_kept() -> None:
    # Given a two-node job training under gpu_idle action relaunch
    world = GroupWorld(manifest(TWO_NODES, "{minutes: 5, action: relaunch}", "[torchrun, train.py]"))
    attempt = world.training()
    idle, peer = attempt.nodes[1], attempt.nodes[0]
    # When node 1's agent reports Training.Idle
    record(world, idle_error(node=1))
    # Then node 1's instance was terminated, node 0's kept for the next attempt, and the attempt ended idle
    assert world.compute.states[idle.instance_id] == "terminated"
    assert world.compute.states[peer.instance_id] == "running"
    first = world.job().attempts[0]
    assert {node.node: node.end_reason for node in first.nodes} == {0: END_KEPT, 1: END_IDLE}
    assert first.end_reason == END_IDLE
    assert "node 1's GPUs stayed below" in world.job().timeline[-1].detail
    # When the next attempt is acquired
    second = world.acquire(later(31))
    # Then it adopts the kept node beside one new node
    assert peer.instance_id in second.instance_ids()
    assert idle.instance_id not in second.instance_ids()
    assert len(second.nodes) == 2


def test_a_training_idle_without_a_policy_fails_the_job() -> None:
    # Given a job without training.gpu_idle (no agent should report Training.Idle for it)
    world = GroupWorld(parse_manifest_text(ONE_NODE + "training: {command: [python, train.py]}\n"))
    world.training()
    # When one is reported anyway
    recorded = record(world, idle_error())
    # Then it is not taken for a restart: the job fails
    assert recorded.failed
