"""The report's data: a job interrupted four times across three zones, as build_report sees it."""

from __future__ import annotations

from datetime import timedelta

from spotrun.control.views.report import build_report
from spotrun.control.views.report_model import STANDBY_PHASE
from spotrun.model.capacity.pricing import job_cost
from spotrun.model.job.record import JobStatus
from spotrun.model.job.telemetry import JobTelemetry
from tests.unit.report_world import ZONES, at, group_job, interrupted_job, running_job, telemetry


def test_the_report_counts_the_attempts_zones_and_pools_of_an_interrupted_job():
    # Given a job interrupted four times across three zones
    job = interrupted_job()

    # When its report is built
    report = build_report(job, telemetry(), at(600))

    # Then it has five attempts in three zones and four pools, four of them ended by a reclaim, a loss or a hang
    assert [row.number for row in report.attempts] == [1, 2, 3, 4, 5]
    assert report.zones == ZONES
    assert report.pools == [
        "g5.xlarge us-east-1a",
        "g5.xlarge us-east-1b",
        "g6.xlarge us-east-1c",
    ]
    assert report.interruptions == 4
    assert report.recoveries == 4
    # And the steps trained again are the attempts' steps lost
    assert report.steps_trained_again == 250
    # And an ended job is drawn up to its end, whatever the report's time
    assert report.until == at(425)
    assert report.duration_seconds == 425 * 60


def test_each_state_has_its_duration_and_belongs_to_its_attempt():
    # Given the job's timeline (a BOOTING per attempt)
    report = build_report(interrupted_job(), JobTelemetry(), at(600))

    # When the states are read
    training = [s for s in report.states if s.status is JobStatus.TRAINING]

    # Then each attempt trained once, for the minutes between its TRAINING and its end
    assert [(s.attempt, s.seconds / 60) for s in training] == [(1, 87), (2, 78), (3, 61), (4, 41), (5, 111)]
    # And the states add up to the job's duration (the terminal one lasts nothing)
    assert sum(s.seconds for s in report.states) == report.duration_seconds
    assert report.states[0].attempt is None  # SUBMITTED belongs to no attempt
    assert [s.attempt for s in report.states if s.status is JobStatus.INTERRUPTED] == [1, 2, 3, 4]


def test_an_instance_launched_on_the_warning_stands_by_until_its_attempt_begins():
    # Given attempt 2's instance, launched on attempt 1's warning three minutes before the job moved to it
    report = build_report(interrupted_job(), JobTelemetry(), at(600))

    # When its bar is read
    second = next(span for span in report.instances if span.attempt == 2)

    # Then it starts as a standby, then takes the job's states
    assert second.start == at(93)
    assert second.phases[0].state == STANDBY_PHASE
    assert (second.phases[0].start, second.phases[0].end) == (at(93), at(95))
    assert [p.state for p in second.phases[1:]] == ["ACQUIRING", "BOOTING", "STAGING", "TRAINING"]
    # And the first attempt, launched for itself, has no standby time
    first = next(span for span in report.instances if span.attempt == 1)
    assert first.phases[0].state == "BOOTING"


def test_warnings_interruptions_and_restores_are_listed_with_what_ended_each_attempt():
    # Given the job's attempts
    report = build_report(interrupted_job(), telemetry(), at(600))

    # When its events are read
    kinds = [(event.attempt, event.kind) for event in report.events]

    # Then the warned reclaims, the loss without warning, the hang and the end are there, in time order
    assert kinds == [
        (1, "rebalance"),
        (1, "warning"),
        (1, "interruption"),
        (2, "rebalance"),
        (2, "warning"),
        (2, "interruption"),
        (3, "gpu-memory-high"),
        (3, "interruption"),
        (4, "restart"),
        (5, "end"),
    ]
    assert [e.at for e in report.events] == sorted(e.at for e in report.events)
    warning = next(e for e in report.events if e.kind == "warning")
    assert "committed in time" in warning.text
    lost = [e for e in report.events if e.kind == "interruption"][-1]
    assert lost.text == "attempt 3: instance lost without a warning at step 3100"
    # And each restore names its step, the attempt that reached it and when training from it began
    assert [(r.attempt, r.step, r.committed_by) for r in report.restores] == [
        (2, 1200, 1),
        (3, 2300, 2),
        (4, 3000, 3),
        (5, 3250, 4),
    ]
    assert report.restores[0].restored_by == at(102)


def test_the_cost_series_ends_at_the_jobs_cost_and_stays_under_on_demand():
    # Given the job and its record's cost
    job = interrupted_job()
    assert job.cost is not None

    # When its report is built
    report = build_report(job, JobTelemetry(), at(600))

    # Then the accrued cost ends where the record's does, and on-demand where the compared instances' would
    last = report.cost_series[-1]
    assert last.at == at(425)
    assert round(last.paid_usd, 4) == job.cost.usd
    assert round(last.on_demand_usd, 4) == job.cost.spot_at_on_demand_usd
    # And it never decreases, and stays under the on-demand line
    paid = [point.paid_usd for point in report.cost_series]
    assert paid == sorted(paid)
    assert all(point.paid_usd <= point.on_demand_usd for point in report.cost_series)
    # And an instance's start costs EC2's minute at once: just before and at attempt 1's start
    before, started = [p for p in report.cost_series if p.at == at(2)]
    assert before.paid_usd == 0
    assert started.paid_usd == round(0.45 / 60, 6)
    # And each attempt's row has its own cost
    assert [row.cost_usd for row in report.attempts] == [
        job_cost(a.billed(), now=at(425)).usd for a in job.attempts
    ]


def test_a_running_job_is_reported_up_to_now():
    # Given a job whose third attempt trains, and the report's time
    now = at(200)
    job = running_job(200)

    # When its report is built
    report = build_report(job, JobTelemetry(), now)

    # Then its open attempt runs up to now, and so does its cost
    assert report.ended_at is None
    assert report.until == now
    third = next(span for span in report.instances if span.attempt == 3)
    assert third.running
    assert third.end == now
    assert report.states[-1].status is JobStatus.TRAINING
    assert report.states[-1].end == now
    assert report.cost.usd == job_cost(job.billed_instances(), now=now).usd
    assert report.cost_series[-1].at == now


def test_a_group_attempt_shows_each_node_and_the_node_it_kept():
    # Given a two-node job whose node 1 was reclaimed and node 0 kept into attempt 2
    report = build_report(group_job(), JobTelemetry(), at(200))

    # When its instances are read
    nodes = [(s.attempt, s.node, s.kept_from, s.end_reason) for s in report.instances]

    # Then every node of every attempt is there, the kept one marked
    assert nodes == [
        (1, 0, None, "kept"),
        (1, 1, None, "interrupted"),
        (2, 0, 1, "completed"),
        (2, 1, None, "completed"),
    ]
    assert all(span.group for span in report.instances)
    # And the warning and the loss are the reclaimed node's
    lost = [e for e in report.events if e.kind in {"warning", "interruption"}]
    assert [(e.node, e.kind) for e in lost] == [(1, "warning"), (1, "interruption")]
    assert report.attempts[0].nodes == 2


def test_the_training_metrics_and_gpu_readings_come_from_the_telemetry():
    # Given the job's telemetry
    series = telemetry()

    # When the report is built
    report = build_report(interrupted_job(), series, at(600))

    # Then its metrics and readings are the telemetry's, with each metric's last value and range
    assert report.metrics == series.metrics
    assert report.gpu == series.gpu
    [loss] = report.metric_summaries
    assert (loss.name, loss.points, loss.last_step) == ("loss", 25, 5000)
    assert loss.last == series.metrics["loss"][-1].value
    assert loss.minimum == min(p.value for p in series.metrics["loss"])


def test_a_record_whose_states_do_not_pair_with_its_attempts_still_places_them_by_time():
    # Given a record cut short: one BOOTING fewer than attempts
    job = interrupted_job()
    dropped = next(i for i, c in enumerate(job.timeline) if c.status is JobStatus.BOOTING and c.at == at(183))
    cut = job.model_copy(update={"timeline": [c for i, c in enumerate(job.timeline) if i != dropped]})

    # When its report is built
    report = build_report(cut, JobTelemetry(), at(600))

    # Then each state belongs to the last attempt started by then
    staging = [s for s in report.states if s.status is JobStatus.STAGING]
    assert [s.attempt for s in staging] == [1, 2, 3, 4, 5]


def test_the_same_inputs_give_the_same_report():
    # Given one record and its telemetry
    job, series = interrupted_job(), telemetry()

    # When the report is built twice, at different times after the job ended
    first = build_report(job, series, at(600))
    second = build_report(job, series, at(600) + timedelta(days=1))

    # Then only the time it was made differs
    assert first.model_copy(update={"generated_at": second.generated_at}) == second


def test_an_unused_standby_is_drawn_and_billed_but_is_no_attempt():
    # Given the job with a standby launched on a warning in a fourth zone, terminated unused
    job = interrupted_job()
    standby = job.attempts[4].model_copy(
        update={
            "number": 6,
            "instance_id": "i-0000000000000beef",
            "availability_zone": "us-east-1d",
            "started_at": at(410),
            "ended_at": at(426),
            "end_reason": "unused-standby",
            "restored_step": None,
            "last_step": None,
        }
    )
    job = job.model_copy(update={"unused_instances": [standby]})
    job = job.model_copy(update={"cost": job_cost(job.billed_instances())})

    # When its report is built
    report = build_report(job, JobTelemetry(), at(600))

    # Then the standby has its bar and its row, marked unused, and its cost is in the job's
    span = report.instances[-1]
    assert (span.instance_id, span.unused, span.pool) == ("i-0000000000000beef", True, "g5.xlarge us-east-1d")
    assert [phase.state for phase in span.phases] == [STANDBY_PHASE]
    assert report.attempts[-1].unused
    assert report.attempts[-1].cost_usd == job_cost([standby]).usd
    # And the charts run to its end, a minute after the job's, where the accrued cost is the record's
    assert report.until == at(426)
    assert (
        round(report.cost_series[-1].paid_usd, 4) == report.cost.usd == job_cost(job.billed_instances()).usd
    )
    # And it is no attempt: the attempts ran in three zones, though its pool is drawn
    assert report.zones == ZONES
    assert "g5.xlarge us-east-1d" in report.pools
