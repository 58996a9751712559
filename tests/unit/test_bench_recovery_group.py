"""The group recovery bench's arithmetic, on recorded timelines: the recovery, the GPU-seconds lost, the table."""

from __future__ import annotations

import json

import pytest

from bench.recovery_group import GroupRecoveryConfig
from bench.recovery_group_report import markdown, summarize
from bench.recovery_group_timeline import (
    GroupTimeline,
    IncompleteTimeline,
    NodeSeen,
    group_figures,
    overlap,
)

T0 = 1_700_000_000.0  # the warning
SCALE = 0.05  # every second of a new node's boot counts 20 on AWS's clock: 19 more


def kept(**changes) -> GroupTimeline:
    """A kept group as the probe records one: node 0 warned, its replacement launched 0.5 s after the warning."""
    values = {
        "warning": T0,
        "nodes": {
            "i-warned": NodeSeen(
                "warned", launched=T0 - 40, running=T0 - 37, reachable=T0 - 34, ended=T0 + 2.0
            ),
            "i-healthy": NodeSeen("healthy", launched=T0 - 40, running=T0 - 37, reachable=T0 - 34),
            "i-new": NodeSeen("new", launched=T0 + 0.5, running=T0 + 3.5, reachable=T0 + 6.5),
        },
        "old_saved": {10: T0 - 1.0, 13: T0 + 0.2},
        "old_committed": {10: T0 - 0.5, 13: T0 + 0.8},
        "old_last_progress": (13, T0 + 0.3),
        "first_step": (14, T0 + 20.0),
        "restored_step": 13,
        **changes,
    }
    return GroupTimeline(**values)


def reclaimed(**changes) -> GroupTimeline:
    """A group relaunched once EC2 reclaimed the warned node: both old nodes released 2 s after the warning, the
    notice over 6 s after it (120 s at the scale 0.05), the new nodes launched 0.5 s later and reachable 6 s on."""
    nodes = {
        "i-warned": NodeSeen("warned", launched=T0 - 40, running=T0 - 37, reachable=T0 - 34, ended=T0 + 2.0),
        "i-healthy": NodeSeen(
            "healthy", launched=T0 - 40, running=T0 - 37, reachable=T0 - 34, ended=T0 + 2.0
        ),
        "i-new-a": NodeSeen("new", launched=T0 + 6.5, running=T0 + 9.5, reachable=T0 + 12.5),
        "i-new-b": NodeSeen("new", launched=T0 + 6.5, running=T0 + 9.5, reachable=T0 + 12.5),
    }
    return kept(**{"nodes": nodes, "first_step": (14, T0 + 26.0), "reclaimed": T0 + 6.0, **changes})


def relaunched(**changes) -> GroupTimeline:
    """A relaunched group: both old nodes released 2 s after the warning, two new ones launched 0.5 s later."""
    nodes = {
        "i-warned": NodeSeen("warned", launched=T0 - 40, running=T0 - 37, reachable=T0 - 34, ended=T0 + 2.0),
        "i-healthy": NodeSeen(
            "healthy", launched=T0 - 40, running=T0 - 37, reachable=T0 - 34, ended=T0 + 2.0
        ),
        "i-new-a": NodeSeen("new", launched=T0 + 2.5, running=T0 + 5.5, reachable=T0 + 8.5),
        "i-new-b": NodeSeen("new", launched=T0 + 2.5, running=T0 + 5.5, reachable=T0 + 8.5),
    }
    return kept(nodes=nodes, **{"first_step": (14, T0 + 22.0), **changes})


def test_the_recovery_runs_from_the_warning_to_the_first_resumed_step_and_its_boot_is_stretched_on_aws():
    # Given a kept group's timeline
    figures = group_figures(kept(), SCALE)
    # Then the recovery ends at the first resumed step, and its parts are timed on their own events
    assert figures.recovery == pytest.approx(20.0)
    assert figures.boot == pytest.approx(6.0)
    assert figures.commit == pytest.approx(0.8)
    assert figures.restart == pytest.approx(13.5)  # the new node reachable -> the first step
    # And on AWS's clock the 6 s of boot inside it count 20 times
    assert figures.recovery_aws == pytest.approx(20.0 + 19 * 6.0)
    assert (figures.restored_step, figures.steps_lost, figures.nodes_released) == (13, 0, 1)


def test_a_kept_node_waiting_counts_and_the_training_after_the_warning_does_not():
    # Given a kept group whose old nodes trained until 0.3 s after the warning, a step the restore holds
    figures = group_figures(kept(), SCALE)
    # Then the warned node loses from its last step to its termination, the kept one from its last step to the
    # resumed step, and the replacement from running (its pending boot is not billed)
    assert figures.lost_by_role == pytest.approx({"warned": 1.7, "healthy": 19.7, "new": 16.5})
    assert figures.gpu_seconds_lost == pytest.approx(37.9)
    # And on AWS's clock the kept node's wait for the boot and the replacement's SSM registration stretch; the
    # warned node, released before the resumed step, waits on no boot
    assert figures.lost_by_role_aws == pytest.approx(
        {"warned": 1.7, "healthy": 19.7 + 19 * 6.0, "new": 16.5 + 19 * 3.0}
    )


def test_a_relaunched_group_loses_both_old_nodes_until_their_release_and_both_new_ones_from_running():
    # Given a relaunched group's timeline
    figures = group_figures(relaunched(), SCALE)
    # Then each old node loses until its release, each new one from running to the resumed step
    assert figures.lost_by_role == pytest.approx({"warned": 1.7, "healthy": 1.7, "new": 2 * 16.5})
    assert figures.lost_by_role_aws == pytest.approx(
        {"warned": 1.7, "healthy": 1.7, "new": 2 * (16.5 + 19 * 3)}
    )
    assert figures.recovery_aws == pytest.approx(22.0 + 19 * 6.0)
    assert figures.nodes_released == 2


def test_a_relaunch_after_the_reclaim_stretches_the_notice_it_waited_out_on_aws():
    # Given a group relaunched once EC2 reclaimed the warned node, 6 s of notice and 6 s of boot after it
    figures = group_figures(reclaimed(), SCALE)
    # Then the new group was launched 6.5 s after the warning, and on AWS's clock both the notice and the boot
    # count 20 times; the 0.5 s between the reclaim and the launch, and the restart, count as measured
    assert figures.launch == pytest.approx(6.5)
    assert figures.recovery == pytest.approx(26.0)
    assert figures.recovery_aws == pytest.approx(26.0 + 19 * (6.0 + 6.0))
    # And the old nodes, released before the notice ended, lose as measured; the new ones from running
    assert figures.lost_by_role_aws == pytest.approx(
        {"warned": 1.7, "healthy": 1.7, "new": 2 * (16.5 + 19 * 3.0)}
    )


def test_a_node_billed_through_the_notice_waits_it_out_on_aws():
    # Given the same, but the healthy node billed until the resumed step (never released)
    nodes = dict(reclaimed().nodes)
    nodes["i-healthy"] = NodeSeen("healthy", launched=T0 - 40, running=T0 - 37, reachable=T0 - 34)
    figures = group_figures(reclaimed(nodes=nodes), SCALE)
    # Then its wait through the notice from its last step (0.3 -> 6 s) and the boot (6 s) counts 20 times on
    # AWS's clock
    assert figures.lost_by_role["healthy"] == pytest.approx(25.7)
    assert figures.lost_by_role_aws["healthy"] == pytest.approx(25.7 + 19 * (5.7 + 6.0))


def test_steps_past_the_restored_checkpoint_are_lost_so_their_training_counts_as_lost():
    # Given an old group that reported step 15 but resumes from 13
    figures = group_figures(kept(old_last_progress=(15, T0 + 0.5)), SCALE)
    # Then the steps are lost and its nodes lose from the warning itself
    assert figures.steps_lost == 2
    assert figures.lost_by_role["warned"] == pytest.approx(2.0)
    assert figures.lost_by_role["healthy"] == pytest.approx(20.0)


def test_a_new_node_idles_from_running_even_while_the_old_group_still_saves():
    # Given an old group whose last step (the save it resumes from) came 4 s after the warning, after the
    # replacement was running (3.5 s)
    figures = group_figures(kept(old_last_progress=(13, T0 + 4.0)), SCALE)
    # Then the replacement loses from running, the old nodes only from that last step
    assert figures.lost_by_role["new"] == pytest.approx(16.5)
    assert figures.lost_by_role["healthy"] == pytest.approx(16.0)
    assert figures.lost_by_role["warned"] == 0.0  # released (2 s) before it


def test_gpu_seconds_count_every_gpu_of_an_instance():
    # Given the same group on instances of 4 GPUs
    nodes = {iid: NodeSeen(**{**seen.__dict__, "gpus": 4}) for iid, seen in kept().nodes.items()}
    # Then every lost second counts four times
    assert group_figures(kept(nodes=nodes), SCALE).gpu_seconds_lost == pytest.approx(4 * 37.9)


def test_overlap_counts_the_union_of_spans_once():
    # Given two boots that overlap / Then the seconds of a window inside either are counted once
    assert overlap(1.0, 10.0, [(3.0, 8.0), (0.0, 5.0)]) == pytest.approx(7.0)
    assert overlap(6.0, 7.0, [(0.0, 5.0)]) == 0.0


@pytest.mark.parametrize(
    ("changes", "what"),
    [
        ({"warning": None}, "the warning"),
        ({"first_step": None}, "first step"),
        ({"restored_step": None}, "restored step"),
        ({"old_committed": {10: T0}}, "commit of step 13"),
        ({"old_last_progress": None}, "progress"),
    ],
)
def test_a_missing_event_is_an_error_that_names_it(changes, what):
    # Given a timeline without one event / When the figures are computed / Then that event is named
    with pytest.raises(IncompleteTimeline, match=what):
        group_figures(kept(**changes), SCALE)


def test_a_group_with_no_new_node_is_an_error():
    # Given a timeline where nothing was launched after the warning / Then no recovery can be timed
    nodes = {iid: seen for iid, seen in kept().nodes.items() if seen.role != "new"}
    with pytest.raises(IncompleteTimeline, match="launched after the warning"):
        group_figures(kept(nodes=nodes), SCALE)


def test_a_timeline_survives_the_json_line_of_the_child():
    # Given a timeline sent as JSON (keys become strings, tuples lists) / When read back / Then it is the same
    assert GroupTimeline.from_dict(json.loads(json.dumps(kept().as_dict()))) == kept()


def run_of(mode: str, timeline: GroupTimeline) -> dict:
    return json.loads(json.dumps({"mode": mode, "timeline": timeline.as_dict(), "kept": []}))


def test_summary_gives_medians_per_mode_and_the_ratios_of_medians():
    # Given kept runs of 18, 20 and 25 s and relaunched runs of 22 and 30 s, interleaved
    measured = [
        run_of("keep", kept(first_step=(14, T0 + 20.0))),
        run_of("relaunch", relaunched(first_step=(14, T0 + 22.0))),
        run_of("keep", kept(first_step=(14, T0 + 18.0))),
        run_of("relaunch", relaunched(first_step=(14, T0 + 30.0))),
        run_of("keep", kept(first_step=(14, T0 + 25.0))),
    ]
    # When summarized
    results = summarize(measured, GroupRecoveryConfig(), {"before": 4.2, "after": 5.1})
    # Then each mode has its median and range, and the ratio is of the medians
    assert results["summary"]["keep"]["recovery"] == {"median": 20.0, "min": 18.0, "max": 25.0, "n": 3}
    assert results["summary"]["relaunch"]["recovery"]["median"] == pytest.approx(26.0)
    assert results["ratios"]["relaunch"]["recovery"] == pytest.approx(20.0 / 26.0)
    assert results["ratios"]["relaunch"]["recovery_aws"] == pytest.approx((20.0 + 114) / (26.0 + 114))
    # And the table shows both sides, the parts per node role, each run's releases and the load
    table = markdown(results)
    assert (
        "| warning → first resumed step, wall | 20.0 s [18.0\u201325.0] | 26.0 s [22.0\u201330.0] |" in table
    )
    assert (
        "| · the healthy node (kept waiting, or until released) | 19.7 GPU-s [17.7\u201324.7] | 1.7 GPU-s"
        in table
    )
    assert "| old nodes released before the resumed step (each run) | 1, 1, 1 | 2, 2 |" in table
    assert (
        "kept ÷ relaunched on the warning, warning → first resumed step, wall (ratio of medians): 0.77\u00d7"
        in table
    )
    assert "Load average (1 min) 4.2 before the runs, 5.1 after." in table
    assert "3 keep, 2 relaunch runs" in table


def test_kept_is_compared_with_each_baseline_measured():
    # Given kept, relaunched and reclaimed runs, interleaved
    measured = [
        run_of("keep", kept()),
        run_of("relaunch", relaunched()),
        run_of("reclaimed", reclaimed()),
        run_of("keep", kept(first_step=(14, T0 + 24.0))),
        run_of("relaunch", relaunched(first_step=(14, T0 + 26.0))),
        run_of("reclaimed", reclaimed(first_step=(14, T0 + 30.0))),
    ]
    # When summarized
    results = summarize(measured, GroupRecoveryConfig())
    # Then kept is set against each baseline on its own medians
    assert set(results["ratios"]) == {"relaunch", "reclaimed"}
    assert results["ratios"]["reclaimed"]["recovery"] == pytest.approx(22.0 / 28.0)
    assert results["ratios"]["reclaimed"]["recovery_aws"] == pytest.approx((22.0 + 114) / (28.0 + 228))
    assert results["ratios"]["relaunch"]["recovery"] == pytest.approx(22.0 / 24.0)
    # And the table has three columns, the launch row, and a ratio line for each baseline
    table = markdown(results)
    assert table.splitlines()[0].count("|") == 5
    assert "| warning → the first new node launched, wall | 0.5 s [0.5\u20130.5] | 2.5 s" in table
    assert "kept ÷ relaunched once EC2 reclaimed the node, warning → first resumed step, AWS's clock" in table
    assert "2 keep, 2 relaunch, 2 reclaimed runs" in table


def test_a_summary_of_one_mode_makes_up_no_ratio():
    # Given only kept runs / When summarized / Then there is no ratio and the table has one column
    results = summarize([run_of("keep", kept())], GroupRecoveryConfig())
    assert results["ratios"] == {}
    table = markdown(results)
    assert "ratio of medians" not in table
    assert "relaunched" not in table.splitlines()[0]
