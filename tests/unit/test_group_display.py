"""What `status` and the live view show of a two-node job: each node of each attempt, the kept one and the
warned one."""

from __future__ import annotations

from rich.console import Console

from spotrun.cli.attach import job_events
from spotrun.cli.display.summary import final_summary
from tests.unit.group_world import GroupWorld, later


def replaced_group() -> GroupWorld:
    # A group whose node 1 was warned, recorded, and replaced beside the kept node 0.
    world = GroupWorld()
    attempt = world.training()
    world.warn(attempt.nodes[1].instance_id, later(5))
    world.record("Spot.Interrupted", later(7))
    world.acquire(later(8))
    return world


def test_status_shows_each_node_of_each_attempt_with_the_kept_one() -> None:
    # Given a group whose lost node was replaced
    world = replaced_group()
    job = world.job()
    # When `status` renders it
    console = Console(record=True, width=220)
    console.print(final_summary(job, later(9)))
    text = console.export_text()
    # Then the nodes table lists both attempts' nodes: the kept node twice, the second time "kept from #1"
    kept = job.attempts[1].nodes[0] if job.attempts[1].nodes[0].kept_from else job.attempts[1].nodes[1]
    assert "nodes" in text
    assert text.count(kept.instance_id) >= 2
    assert "kept from #1" in text
    assert "interrupted" in text


def test_the_live_view_names_the_warned_node_and_the_kept_one() -> None:
    # Given the views of a group before its warning, after it, and after the replacement
    world = GroupWorld()
    attempt = world.training()
    before = world.job().model_dump(mode="json")
    world.warn(attempt.nodes[1].instance_id, later(5))
    warned = world.job().model_dump(mode="json")
    world.record("Spot.Interrupted", later(7))
    world.acquire(later(8))
    replaced = world.job().model_dump(mode="json")
    # When the live view computes what changed
    warning = [event.text for event in job_events(before, warned)]
    relaunch = [event.text for event in job_events(warned, replaced)]
    # Then the warning names node 1's instance and says every node checkpoints; the next attempt names the kept
    assert any(attempt.nodes[1].instance_id in text and "every node checkpoints" in text for text in warning)
    assert any("2 x " in text and f"{attempt.nodes[0].instance_id} kept" in text for text in relaunch)
