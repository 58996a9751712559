"""A two-node job's capacity: one request for the group, readiness of every node, each node's command, a lost
node replaced alone, and the group moving when its zone has no replacement."""

from __future__ import annotations

import pytest

from spotrun.model.errors import CapacityUnavailable
from spotrun.model.job.attempt import END_KEPT
from spotrun.model.job.limits import budget_stop_at
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.manifest.schema import Budget
from tests.unit.group_world import SETTINGS, TIMING, GroupWorld, later


def test_a_group_is_launched_in_one_all_or_nothing_request_in_its_zones_placement_group() -> None:
    # Given a two-node job
    world = GroupWorld()
    # When capacity is acquired
    attempt = world.acquire()
    # Then one CreateFleet asked for both nodes in one zone, each override in its subnet's placement group
    [request] = world.compute.fleet_requests
    assert request["TargetCapacitySpecification"]["TotalTargetCapacity"] == 2
    assert request["SpotOptions"]["MinTargetCapacity"] == 2
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    by_subnet = dict(zip(SETTINGS.subnet_ids, SETTINGS.placement_group_names, strict=True))
    assert all(o["Placement"]["GroupName"] == by_subnet[o["SubnetId"]] for o in overrides)
    # And the attempt holds both nodes, node 0's instance as its own
    assert [node.node for node in attempt.nodes] == [0, 1]
    assert attempt.instance_id == attempt.nodes[0].instance_id


def test_the_group_is_ready_only_once_every_node_is_and_is_numbered_by_address() -> None:
    # Given a launched group whose second node's SSM agent is not online yet
    world = GroupWorld()
    attempt = world.acquire()
    world.commands.unregistered.add(attempt.nodes[1].instance_id)
    # When readiness is checked, Then it is not ready
    assert not world.ready()
    # When that agent comes online
    world.commands.unregistered.clear()
    # Then the group is ready, its nodes numbered in the order of their addresses (as torch ranks them)
    assert world.ready()
    nodes = world.job().current_attempt.nodes
    addresses = [node.private_ip for node in nodes]
    assert addresses == sorted(addresses)
    assert None not in addresses
    # The fake's addresses sort against launch order: node 0 is the second instance launched
    assert nodes[0].instance_id == attempt.nodes[1].instance_id


def test_each_node_gets_its_own_command_naming_node_0_as_the_rendezvous() -> None:
    # Given a ready group
    world = GroupWorld()
    world.acquire()
    assert world.ready()
    world.dispatch("stage")
    # When the train step is dispatched
    commands = world.dispatch("train")
    # Then each node got one command with its place, the group's size and node 0's address
    nodes = world.job().current_attempt.nodes
    assert [c.group.node for c in commands if c.group] == [0, 1]
    assert {c.group.rendezvous_host for c in commands if c.group} == {nodes[0].private_ip}
    assert {c.group.nodes for c in commands if c.group} == {2}
    # And the hang bound of a group (30 minutes by default) goes with the train step
    assert {c.hang_seconds for c in commands} == {1800.0}


def test_a_warning_on_one_node_tells_every_node_and_launches_its_replacement_in_the_same_pool() -> None:
    # Given a group training
    world = GroupWorld()
    attempt = world.training()
    sent = len(world.commands.sent)
    # When node 1 is warned
    world.warn(attempt.nodes[1].instance_id, later(5))
    # Then both nodes got the notice
    notices = world.commands.sent[sent:]
    assert sorted(instance for _, instance, _ in notices) == sorted(attempt.instance_ids())
    # And one replacement was launched in the group's pool and placement group
    job = world.job()
    assert job.standby is not None
    assert (job.standby.instance_type, job.standby.availability_zone) == (
        attempt.instance_type,
        attempt.availability_zone,
    )
    replacement = world.compute.fleet_requests[-1]
    assert replacement["TargetCapacitySpecification"]["TotalTargetCapacity"] == 1
    assert {o["Placement"]["GroupName"] for o in replacement["LaunchTemplateConfigs"][0]["Overrides"]} == {
        "spotrun-a" if attempt.availability_zone == "us-east-1a" else "spotrun-b"
    }
    # And the warned node's notice is on its own node and on the attempt
    warned = job.current_attempt.node_on(attempt.nodes[1].instance_id)
    assert warned is not None
    assert warned.notice_at == later(5)
    assert job.current_attempt.notice_at == later(5)


def test_a_lost_node_is_replaced_alone_and_the_healthy_one_is_kept() -> None:
    # Given a group training whose node 1 was warned
    world = GroupWorld()
    attempt = world.training()
    healthy, warned = attempt.nodes[0].instance_id, attempt.nodes[1].instance_id
    world.warn(warned, later(5))
    standby = world.job().standby
    # When the interruption is recorded and capacity acquired again
    world.record("Spot.Interrupted", later(7))
    # Then only the warned node was terminated; the healthy one is kept
    assert world.compute.states[warned] == "terminated"
    assert world.compute.states[healthy] == "running"
    first = world.job().attempts[0]
    assert {node.instance_id: node.end_reason for node in first.nodes} == {
        healthy: END_KEPT,
        warned: "interrupted",
    }
    assert first.end_reason == "interrupted"
    # When the next attempt is acquired
    second = world.acquire(later(8))
    # Then it runs on the kept node and the standby launched on the warning, nothing more launched
    assert standby is not None
    assert set(second.instance_ids()) == {healthy, standby.instance_id}
    assert len(world.compute.fleet_requests) == 2
    kept = second.node_on(healthy)
    assert kept is not None
    assert kept.kept_from == 1
    assert kept.started_at == later(7)
    assert world.job().standby is None


def test_without_a_standby_the_missing_node_is_launched_in_the_groups_pool() -> None:
    # Given a group whose node 1 died without a warning (EC2 says terminated)
    world = GroupWorld()
    attempt = world.training()
    world.compute.states[attempt.nodes[1].instance_id] = "terminated"
    world.record("Instance.Lost", later(6))
    # When the next attempt is acquired
    second = world.acquire(later(7))
    # Then one node was launched in the group's zone, beside the kept one
    request = world.compute.fleet_requests[-1]
    assert request["TargetCapacitySpecification"]["TotalTargetCapacity"] == 1
    assert {o["SubnetId"] for o in request["LaunchTemplateConfigs"][0]["Overrides"]} == {
        "subnet-a" if attempt.availability_zone == "us-east-1a" else "subnet-b"
    }
    assert attempt.nodes[0].instance_id in second.instance_ids()
    assert second.availability_zone == attempt.availability_zone


def test_the_group_waits_for_a_replacement_then_moves_to_another_zone() -> None:
    # Given a group that lost node 1, in a zone with no capacity left
    world = GroupWorld()
    attempt = world.training()
    healthy = attempt.nodes[0].instance_id
    world.compute.states[attempt.nodes[1].instance_id] = "terminated"
    world.record("Instance.Lost", later(6))
    world.compute.full_subnets = {"subnet-a" if attempt.availability_zone == "us-east-1a" else "subnet-b"}
    # When capacity is asked for within replace_node_minutes, Then the job waits, its healthy node kept
    with pytest.raises(CapacityUnavailable):
        world.acquire(later(7))
    assert world.compute.states[healthy] == "running"
    # When the bound has passed, the zone still full
    moved = world.acquire(later(6 + TIMING.replace_node_seconds / 60 + 1))
    # Then the kept node was terminated and billed until the move, and a whole group launched in another zone
    assert world.compute.states[healthy] == "terminated"
    assert moved.availability_zone != attempt.availability_zone
    assert len(moved.nodes) == 2
    assert healthy not in moved.instance_ids()
    [unused] = [u for u in world.job().unused_instances if u.instance_id == healthy]
    assert unused.started_at == later(6)
    assert unused.ended_at is not None
    assert unused.ended_at > later(16)


def test_a_hung_group_restarts_on_the_same_nodes() -> None:
    # Given a group training
    world = GroupWorld()
    attempt = world.training()
    # When its agents report Training.Hung and the next attempt is acquired
    world.record("Training.Hung", later(30))
    second = world.acquire(later(31))
    # Then no node was terminated, the attempt ended "hung" and counts as a restart, and nothing was launched
    assert set(second.instance_ids()) == set(attempt.instance_ids())
    assert world.job().attempts[0].end_reason == "hung"
    assert world.job().interruptions == 1
    assert len(world.compute.fleet_requests) == 1


def test_with_keep_healthy_nodes_off_the_whole_group_is_relaunched() -> None:
    # Given a group training whose node 1 died, in a deployment that relaunches whole groups (the peers' way)
    world = GroupWorld()
    attempt = world.training()
    world.compute.states[attempt.nodes[1].instance_id] = "terminated"
    # When the loss is recorded and capacity acquired again
    world.record("Instance.Lost", later(6), keep_healthy_nodes=False)
    second = world.acquire(later(7))
    # Then the healthy node was terminated too, and two new nodes were launched
    assert world.compute.states[attempt.nodes[0].instance_id] == "terminated"
    assert not set(second.instance_ids()) & set(attempt.instance_ids())
    assert world.compute.fleet_requests[-1]["TargetCapacitySpecification"]["TotalTargetCapacity"] == 2


def test_a_groups_budget_runs_out_n_times_as_fast() -> None:
    # Given a two-node attempt at 0.36 USD/h a node, started at T0, and a budget of 0.36 USD
    world = GroupWorld()
    attempt = world.acquire().model_copy(update={"price_per_hour": 0.36})
    job = world.job().model_copy(update={"attempts": [attempt]})
    job = job.model_copy(
        update={"manifest": job.require_manifest().model_copy(update={"budget": Budget(max_usd=0.36)})}
    )
    # When the train step's stop time is computed (no margin)
    stop_at = budget_stop_at(job, attempt, margin_seconds=0, now=later(1))
    # Then the budget lasts half an hour, not an hour: both nodes bill
    assert stop_at == later(30)


def test_a_failed_command_beside_a_dead_peer_is_that_peers_loss() -> None:
    # Given a group training whose node 1 died silently (EC2 says terminated)
    world = GroupWorld()
    attempt = world.training()
    world.compute.states[attempt.nodes[1].instance_id] = "terminated"
    # When node 0's command fails (gloo lost its peer) and the workflow records it
    record = world.record("Training.Failed", later(6))
    # Then it is node 1's loss: the attempt ended, node 0 kept for the next one
    assert not record.failed
    first = world.job().attempts[0]
    assert first.end_reason == "instance-lost"
    assert first.nodes[0].end_reason == END_KEPT


def test_a_failed_command_with_every_node_alive_fails_the_job_and_records_nothing() -> None:
    # Given a group training, both nodes running
    world = GroupWorld()
    world.training()
    version = world.job().version
    # When a node's command fails
    record = world.record("Training.Failed", later(6))
    # Then the workflow is told it failed, and the record is untouched
    assert record.failed
    assert world.job().version == version


@pytest.mark.parametrize(("efa", "template"), [("true", "spotrun-agent-efa"), ("false", "spotrun-agent")])
def test_resources_efa_chooses_the_groups_launch_template(efa: str, template: str) -> None:
    # Given a two-node job on types that all offer an EFA, with resources.efa on or off
    manifest = parse_manifest_text(
        f"name: ddp\nresources: {{instance_types: [g5.8xlarge, g4dn.8xlarge], nodes: 2, efa: {efa}}}\n"
        'training: {command: [torchrun, --nproc-per-node, "1", train.py]}\n'
    )
    world = GroupWorld(manifest)
    # When capacity is acquired
    attempt = world.acquire()
    # Then the request names the EFA template only when the manifest wants one, and the attempt records it
    [request] = world.compute.fleet_requests
    assert (
        request["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"] == template
    )
    assert attempt.efa is (efa == "true")
