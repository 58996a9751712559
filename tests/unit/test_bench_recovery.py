"""The recovery bench's arithmetic, on recorded timelines: the recovery, its parts, the limit, the verdicts."""

from __future__ import annotations

import json

import pytest

from bench.recovery import RecoveryConfig
from bench.recovery_report import markdown, summarize
from bench.recovery_timeline import IncompleteTimeline, Timeline, recovery_figures

T0 = 1_700_000_000.0  # the warning


def recorded(**changes) -> Timeline:
    """A timeline as the probe records one: checkpoint 50 committed before the warning, 60 saved on it."""
    values = {
        "warning": T0,
        "old_saved": {50: T0 - 3.0, 60: T0 + 0.4},
        "old_committed": {50: T0 - 2.0, 60: T0 + 1.9},
        "old_last_step": 61,
        "launched": T0 + 0.5,
        "reachable": T0 + 6.6,
        "restore_started": T0 + 7.0,
        "restored": {60: T0 + 8.0},
        "first_step": (61, T0 + 9.1),
        **changes,
    }
    return Timeline(**values)


def test_recovery_runs_from_the_warning_to_the_first_resumed_step_and_the_limit_from_the_parts():
    # Given a recorded timeline
    figures = recovery_figures(recorded())
    # Then the recovery ends at the first step's own time, and each part is timed on its own events
    assert figures.recovery == pytest.approx(9.1)
    assert figures.boot == pytest.approx(6.1)  # launched -> reachable
    assert figures.upload == pytest.approx(1.5)  # step 60 complete on the old disk -> its commit marker
    assert figures.restore == pytest.approx(1.0)
    assert figures.save == pytest.approx(0.4)
    # And the limit is max(boot, upload) + restore, the ratio the recovery over it
    assert figures.limit == pytest.approx(7.1)
    assert figures.ratio_to_limit == pytest.approx(9.1 / 7.1)
    assert (figures.restored_step, figures.first_resumed_step, figures.steps_lost) == (60, 61, 1)
    # And with nothing overlapped the least it could take is the commit, then the boot and the restore
    assert figures.sequential == pytest.approx(1.9 + 6.1 + 1.0)
    assert figures.after_launch == pytest.approx(9.1 - 0.5)


def test_the_checkpoint_that_counts_is_the_one_the_replacement_restored():
    # Given the old instance's last save never committed, so the replacement restored step 50
    figures = recovery_figures(
        recorded(old_committed={50: T0 - 2.0}, restored={50: T0 + 8.0}, first_step=(51, 9e9))
    )
    # Then the upload is step 50's, and the steps past it are lost
    assert figures.upload == pytest.approx(1.0)
    assert figures.save is None  # saved before the warning
    assert figures.steps_lost == 11


def test_an_upload_longer_than_the_boot_sets_the_limit():
    # Given an upload that outlasts the boot
    figures = recovery_figures(
        recorded(old_committed={60: T0 + 8.4}, restore_started=T0 + 8.5, restored={60: T0 + 9.0})
    )
    # Then the limit is the upload plus the restore
    assert figures.limit == pytest.approx(8.0 + 0.5)


def test_a_restore_too_quick_to_see_counts_as_zero_not_as_missing():
    # Given the probe never saw the restore's temporary directory
    figures = recovery_figures(recorded(restore_started=None))
    # Then the restore took less than a poll
    assert figures.restore == 0.0


@pytest.mark.parametrize(
    ("field", "what"),
    [
        ("warning", "the warning"),
        ("launched", "launch"),
        ("reachable", "reachable"),
        ("first_step", "first step"),
    ],
)
def test_a_missing_event_is_an_error_that_names_it(field, what):
    # Given a timeline without one event / When the figures are computed / Then that event is named
    with pytest.raises(IncompleteTimeline, match=what):
        recovery_figures(recorded(**{field: None}))


def test_a_restored_checkpoint_that_was_never_committed_is_an_error():
    # Given a restore of a step with no commit seen / Then no upload can be timed: an error, not a zero
    with pytest.raises(IncompleteTimeline, match="commit of step 60"):
        recovery_figures(recorded(old_committed={50: T0}))
    with pytest.raises(IncompleteTimeline, match="restored"):
        recovery_figures(recorded(restored={}))


def test_a_timeline_survives_the_json_line_of_the_child():
    # Given a timeline sent as JSON (whose keys become strings and tuples lists) / When read back
    back = Timeline.from_dict(json.loads(json.dumps(recorded().as_dict())))
    # Then it is the same timeline
    assert back == recorded()


def run_of(mode: str, recovery: float) -> dict:
    timeline = recorded(first_step=(61, T0 + recovery))
    return {"mode": mode, "timeline": timeline.as_dict(), "attempts": 2, "recorded_steps_lost": 1}


def test_verdicts_compare_medians_with_the_issue_targets():
    # Given overlap runs near the limit (7.1 s), and runs after EC2's reclaim twice as long
    measured = [
        run_of("overlap", 9.0),
        run_of("reclaimed", 18.0),
        run_of("overlap", 8.0),
        run_of("reclaimed", 20.0),
        run_of("overlap", 9.5),
    ]
    # When summarized
    results = summarize(measured, RecoveryConfig())
    # Then the ratio to the limit is the median of the per-run ratios, the baseline ratio that of the medians
    over_limit, over_reclaimed = (
        results["verdicts"]["recovery_over_limit"],
        results["verdicts"]["overlap_over_reclaimed"],
    )
    assert over_limit["value"] == pytest.approx(9.0 / 7.1)
    assert over_limit["met"] is True  # 1.27 <= 1.3
    assert over_reclaimed["value"] == pytest.approx(9.0 / 19.0)
    assert over_reclaimed["met"] is True
    assert results["summary"]["overlap"]["recovery"] == {"median": 9.0, "min": 8.0, "max": 9.5, "n": 3}
    # And the table shows both sides, the verdicts and the steps lost
    table = markdown(results)
    assert "| warning → first resumed step | 9.0 s [8.0\u20139.5] | 19.0 s [18.0\u201320.0] |" in table
    assert "1.27\u00d7 **met**" in table
    assert "| steps lost (each run) | 1, 1, 1 | 1, 1 |" in table
    assert (
        "once EC2 has reclaimed the old instance, at the end of its notice (ratio of medians): 0.47\u00d7 **met**"
        in table
    )


def test_a_recovery_far_from_the_limit_is_not_met():
    # Given overlap runs at twice the limit, barely faster than either baseline
    results = summarize(
        [run_of("overlap", 14.2), run_of("sequential", 15.0), run_of("reclaimed", 16.0)], RecoveryConfig()
    )
    # Then no target is met
    verdicts = results["verdicts"]
    assert verdicts["recovery_over_limit"]["met"] is False
    assert verdicts["overlap_over_sequential"]["met"] is False
    assert verdicts["overlap_over_reclaimed"]["met"] is False
    assert "**NOT met**" in markdown(results)


def test_the_floor_says_what_the_sequential_baseline_allows():
    # Given overlap runs at 9.0 s and sequential runs at 11.0 s, every run with a limit of 7.1 s and a sequential
    # limit of 9.0 s
    measured = [
        run_of("overlap", 9.0),
        run_of("sequential", 11.0),
        run_of("overlap", 9.0),
        run_of("sequential", 11.0),
    ]
    # When summarized
    results = summarize(measured, RecoveryConfig())
    verdicts = results["verdicts"]
    # Then the floor is the limit over the sequential limit: no overhead removed could bring the ratio below it
    assert verdicts["overlap_over_sequential"]["value"] == pytest.approx(9.0 / 11.0)
    assert verdicts["floor_over_sequential"]["value"] == pytest.approx(7.1 / 9.0)
    assert verdicts["floor_over_sequential"]["met"] is False
    table = markdown(results)
    assert "would be 0.79\u00d7: 0.6\u00d7 is below what removing overhead can reach" in table
    # And without reclaimed runs, no verdict is made up for them
    assert "overlap_over_reclaimed" not in verdicts
    assert "reclaimed the old instance" not in table


def test_the_target_is_judged_against_the_reclaim_and_the_release_is_shown_beside_it():
    # Given overlap runs at 9.0 s, runs after spotrun's release at 11.0 s and after EC2's reclaim at 19.0 s
    measured = [run_of("overlap", 9.0), run_of("sequential", 11.0), run_of("reclaimed", 19.0)]
    # When summarized
    results = summarize(measured, RecoveryConfig())
    verdicts = results["verdicts"]
    # Then the reclaim is the target's baseline, and the release's ratio, over 0.6x, is shown without a verdict
    assert verdicts["overlap_over_reclaimed"]["judged"] is True
    assert verdicts["overlap_over_sequential"]["judged"] is False
    assert verdicts["overlap_over_sequential"]["met"] is False
    table = markdown(results)
    assert "its notice (ratio of medians): 0.47\u00d7 **met**" in table
    assert (
        "- Shown, not judged: recovery \u00f7 the same job with the replacement launched once spotrun"
        in table
    )
    assert "**NOT met**" not in table


def test_runs_recorded_before_the_modes_count_as_overlap_and_sequential():
    # Given runs recorded with a boolean `overlap` / When summarized
    old = [{**run_of("x", 9.0), "overlap": True}, {**run_of("x", 11.0), "overlap": False}]
    for item in old:
        del item["mode"]
    results = summarize(old, RecoveryConfig())
    # Then they count in the configuration they ran
    assert set(results["summary"]) == {"overlap", "sequential"}
    assert results["summary"]["sequential"]["recovery"]["median"] == pytest.approx(11.0)
