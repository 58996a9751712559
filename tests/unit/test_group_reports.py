"""A group's step answers the workflow once: when every node has reported success, with node 0's result."""

from __future__ import annotations

import pytest

from spotrun.control.agent_reports import (
    AgentReport,
    CallerIdentity,
    ReportInvalid,
    ReportNotWaited,
    answer_agent_report,
)
from spotrun.model.agent_protocol.command import StageResult
from tests.unit.fakes import FakeWorkflows
from tests.unit.group_world import JOB_ID, GroupWorld, later

ACCOUNT = "123456789012"
ROLE = "spotrun-instances"
STAGED = StageResult(files=3, bytes=30, seconds=1.5)


def session(instance_id: str) -> CallerIdentity:
    return CallerIdentity(
        user_arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/{instance_id}", account_id=ACCOUNT
    )


def report(**fields: object):
    body = {"job_id": JOB_ID, "attempt": 1, "step": "stage"} | fields
    return AgentReport.model_validate(body).root


def staging_group() -> tuple[GroupWorld, list[str]]:
    world = GroupWorld()
    world.acquire()
    assert world.ready()
    world.dispatch("stage")
    return world, world.job().current_attempt.instance_ids()


def send(world: GroupWorld, workflows: FakeWorkflows, instance_id: str, body) -> None:
    answer_agent_report(
        body, identity=session(instance_id), instance_role_name=ROLE, store=world.store, workflows=workflows
    )


@pytest.mark.parametrize("first", [0, 1], ids=["node-0-first", "node-1-first"])
def test_the_step_succeeds_once_both_nodes_have_with_node_0s_result(first: int) -> None:
    # Given a group staging
    world, instances = staging_group()
    workflows = FakeWorkflows()
    bodies = {
        0: report(kind="success", output=STAGED.model_dump()),
        1: report(kind="success", output={"node": 1, "seconds": 2.0}),
    }
    # When the first node reports success, Then the workflow is not answered yet
    send(world, workflows, instances[first], bodies[first])
    assert workflows.succeeded == []
    # When the other node does, Then it is answered once, with node 0's result
    send(world, workflows, instances[1 - first], bodies[1 - first])
    [(token, output)] = workflows.succeeded
    assert token == "token-stage"
    assert StageResult.model_validate_json(output) == STAGED


def test_a_second_success_of_the_same_node_does_not_complete_the_group() -> None:
    # Given a group staging whose node 1 reported success
    world, instances = staging_group()
    workflows = FakeWorkflows()
    send(world, workflows, instances[1], report(kind="success", output={"node": 1, "seconds": 2.0}))
    # When node 1 reports it again (a retried request)
    send(world, workflows, instances[1], report(kind="success", output={"node": 1, "seconds": 2.0}))
    # Then the workflow still waits for node 0
    assert workflows.succeeded == []


def test_a_node_must_report_its_own_part() -> None:
    # Given a group staging
    world, instances = staging_group()
    # When node 1 reports node 0's kind of result, or node 0 a NodeDone, Then each is refused
    with pytest.raises(ReportInvalid):
        send(world, FakeWorkflows(), instances[1], report(kind="success", output=STAGED.model_dump()))
    with pytest.raises(ReportInvalid):
        send(world, FakeWorkflows(), instances[0], report(kind="success", output={"node": 1, "seconds": 1.0}))


def test_any_nodes_failure_fails_the_step() -> None:
    # Given a group staging
    world, instances = staging_group()
    workflows = FakeWorkflows()
    # When node 1 fails
    send(world, workflows, instances[1], report(kind="failure", error="Staging.Failed", cause="{}"))
    # Then the step fails
    assert [error for _, error, _ in workflows.failed] == ["Staging.Failed"]


def test_a_kept_node_still_running_its_old_step_hears_it_is_no_longer_waited_on() -> None:
    # Given a group whose attempt ended on node 1's loss, node 0 kept
    world, instances = staging_group()
    world.compute.states[instances[1]] = "terminated"
    world.record("Instance.Lost", later(3))
    # When node 0's agent heartbeats its old step
    # Then it hears the step is not waited on (the agent then abandons it), not that it is a stranger
    with pytest.raises(ReportNotWaited):
        send(world, FakeWorkflows(), instances[0], report(kind="heartbeat"))
