"""A job's report: its attempts across pools and zones, their states, warnings and ends, the checkpoints restored,
the work trained again, its cost against on-demand prices, and its training metrics and GPU readings.

Pure: :func:`build_report` reads the job record and its telemetry (``GET /jobs/{id}`` and
``GET /jobs/{id}/telemetry``) and returns a :class:`~spotrun.control.views.report_model.JobReport`; the renderers in
``spotrun.cli.report`` draw it. The shapes: :mod:`spotrun.control.views.report_model`; the cost over time:
:mod:`spotrun.control.views.report_cost`.

What the record does not hold, the report does not invent: a checkpoint's commit time is not kept (the report
shows what each attempt restored and whether the checkpoint taken on a warning was committed in time).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from spotrun.control.progress import summary_figures
from spotrun.control.views.report_cost import cost_series
from spotrun.control.views.report_model import (
    STANDBY_PHASE,
    AttemptRow,
    CheckpointRestore,
    EventKind,
    InstanceSpan,
    JobReport,
    MetricSummary,
    Phase,
    ReportEvent,
    StateSpan,
)
from spotrun.model.capacity.pricing import job_cost
from spotrun.model.job.attempt import INTERRUPTION_REASONS, RESTART_REASONS, Attempt, NodeRun
from spotrun.model.job.record import Job, JobStatus, timeline_durations
from spotrun.model.job.telemetry import JobTelemetry, MetricPoint

# Why an attempt ended, as people read it (``Attempt.end_reason``; others are shown as they are).
END_REASON_TEXT = {
    "interrupted": "interrupted by EC2 after its warning",
    "instance-lost": "instance lost without a warning",
    "heartbeat-timeout": "agent went silent (heartbeat timeout)",
    "boot-timeout": "instance never became ready (boot timeout)",
    "hung": "training steps stopped advancing (hung)",
    "idle": "GPUs idle (training.gpu_idle relaunch)",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "kept": "kept for the next attempt",
    "deadline-move": "moved by the deadline policy",
    "unused-standby": "standby never used",
}


def pool_of(instance_type: str, availability_zone: str) -> str:
    """The timeline's row of an instance: ``g5.xlarge us-east-1a``."""
    return f"{instance_type} {availability_zone}"


def _state_attempts(job: Job) -> list[int | None]:
    """The attempt each timeline entry belongs to.

    Every attempt starts with one BOOTING entry (the job enters it when an instance is acquired), so the entries
    from an attempt's BOOTING up to the next attempt's are that attempt's, the ACQUIRING just before a BOOTING
    being the next one's; an ACQUIRING with no BOOTING after it (a wait that did not end) belongs to none. When
    the counts disagree (a record cut short), an entry belongs to the last attempt started by then.
    """
    timeline = job.timeline
    numbers = [attempt.number for attempt in job.attempts]
    booting = [i for i, change in enumerate(timeline) if change.status is JobStatus.BOOTING]
    if len(booting) != len(numbers):
        return [
            next((a.number for a in reversed(job.attempts) if a.started_at <= change.at), None)
            for change in timeline
        ]
    owners: list[int | None] = []
    for index, change in enumerate(timeline):
        seen = sum(1 for b in booting if b <= index)
        if change.status is JobStatus.ACQUIRING:
            upcoming = index + 1 < len(timeline) and timeline[index + 1].status is JobStatus.BOOTING
            owners.append(numbers[seen] if upcoming and seen < len(numbers) else None)
        else:
            owners.append(numbers[seen - 1] if seen else None)
    return owners


def state_spans(job: Job, until: datetime) -> list[StateSpan]:
    """The job's timeline with each entry's duration (:func:`timeline_durations`) and attempt."""
    spans = []
    changes = zip(job.timeline, timeline_durations(job, until), _state_attempts(job), strict=True)
    for change, (_, seconds), attempt in changes:
        spans.append(
            StateSpan(
                status=change.status,
                start=change.at,
                end=change.at + timedelta(seconds=seconds),
                seconds=seconds,
                attempt=attempt,
                detail=change.detail,
            )
        )
    return spans


def _phases(start: datetime, end: datetime, states: list[StateSpan], attempt: int) -> list[Phase]:
    """The attempt's states clipped to one instance's life; a standby's time before them comes first."""
    phases = [
        Phase(state=span.status.value, start=max(span.start, start), end=min(span.end, end))
        for span in states
        if span.attempt == attempt and span.end > start and span.start < end and span.end > span.start
    ]
    first = phases[0].start if phases else end
    if first > start:
        phases.insert(0, Phase(state=STANDBY_PHASE, start=start, end=first))
    return phases


def _span(attempt: Attempt, node: NodeRun, until: datetime, states: list[StateSpan]) -> InstanceSpan:
    end = node.ended_at or attempt.ended_at or until
    return InstanceSpan(
        attempt=attempt.number,
        node=node.node,
        group=attempt.group,
        instance_id=node.instance_id,
        instance_type=attempt.instance_type,
        availability_zone=attempt.availability_zone,
        lifecycle=attempt.lifecycle,
        pool=pool_of(attempt.instance_type, attempt.availability_zone),
        start=node.started_at,
        end=max(end, node.started_at),
        running=node.ended_at is None and attempt.ended_at is None,
        end_reason=node.end_reason or attempt.end_reason,
        kept_from=node.kept_from,
        phases=_phases(node.started_at, end, states, attempt.number),
    )


def instance_spans(job: Job, states: list[StateSpan], until: datetime) -> list[InstanceSpan]:
    """Every instance of every attempt (each node of a group), then the standbys that hosted none."""
    spans = [_span(a, node, until, states) for a in job.attempts for node in a.node_runs()]
    for unused in [*job.unused_instances, *([job.standby] if job.standby is not None else [])]:
        end = unused.ended_at or until
        spans.append(
            InstanceSpan(
                attempt=unused.number,
                instance_id=unused.instance_id,
                instance_type=unused.instance_type,
                availability_zone=unused.availability_zone,
                lifecycle=unused.lifecycle,
                pool=pool_of(unused.instance_type, unused.availability_zone),
                start=unused.started_at,
                end=max(end, unused.started_at),
                running=unused.ended_at is None,
                end_reason=unused.end_reason,
                unused=True,
                phases=[Phase(state=STANDBY_PHASE, start=unused.started_at, end=max(end, unused.started_at))],
            )
        )
    return spans


def end_kind(reason: str | None) -> EventKind:
    """How an instance's end reads: an interruption (its capacity went away), a restart (hung, idle), or an end."""
    if reason is None:
        return "end"
    if reason in INTERRUPTION_REASONS:
        return "interruption"
    return "restart" if reason in RESTART_REASONS else "end"


def events(job: Job) -> list[ReportEvent]:
    """Each node's rebalance recommendation, warning, end and first GPU memory high reading; each restore."""
    found: list[ReportEvent] = []
    for attempt in job.attempts:
        pool = pool_of(attempt.instance_type, attempt.availability_zone)
        told = False
        for node in attempt.node_runs():
            where = {"attempt": attempt.number, "node": node.node if attempt.group else None, "pool": pool}
            who = f"attempt {attempt.number}" + (f" node {node.node}" if attempt.group else "")
            if node.rebalance_at is not None:
                text = f"{who}: rebalance recommendation on {node.instance_id}"
                found.append(ReportEvent(at=node.rebalance_at, kind="rebalance", text=text, **where))
            if node.notice_at is not None:
                if attempt.deadline_move:
                    text = f"{who}: the deadline policy moved the job (checkpoint, then a new lifecycle)"
                    found.append(ReportEvent(at=node.notice_at, kind="deadline-move", text=text, **where))
                else:
                    text = f"{who}: spot interruption warning on {node.instance_id}"
                    if attempt.notice_checkpoint_committed is not None and not told:
                        told = True  # said once per attempt, on its first warned node
                        text += (
                            "; the checkpoint taken on it was committed in time"
                            if attempt.notice_checkpoint_committed
                            else "; the checkpoint taken on it was not committed in time"
                        )
                    found.append(ReportEvent(at=node.notice_at, kind="warning", text=text, **where))
            high = node.gpu_memory_high
            if high is not None:
                text = f"{who}: GPU {high.gpu} memory at {high.percent:g} % (out-of-memory ahead)"
                found.append(ReportEvent(at=high.at, kind="gpu-memory-high", text=text, **where))
            reason = node.end_reason or (attempt.end_reason if node.ended_at is None else None)
            ended = node.ended_at or attempt.ended_at
            if ended is not None and reason is not None:
                kind = end_kind(reason)
                text = f"{who}: {END_REASON_TEXT.get(reason, reason)}"
                if kind != "end" and attempt.last_step is not None:
                    text += f" at step {attempt.last_step}"
                found.append(ReportEvent(at=ended, kind=kind, text=text, **where))
    return found


def restores(job: Job, states: list[StateSpan]) -> list[CheckpointRestore]:
    """The checkpoint each attempt restored, when it began to train from it, and the attempt that reached it."""
    found = []
    for index, attempt in enumerate(job.attempts):
        if attempt.restored_step is None:
            continue
        step = attempt.restored_step
        trained = next(
            (s.start for s in states if s.attempt == attempt.number and s.status is JobStatus.TRAINING), None
        )
        earlier = [
            a
            for a in job.attempts[:index]
            if a.last_step is not None and (a.restored_step or 0) < step <= a.last_step
        ]
        found.append(
            CheckpointRestore(
                attempt=attempt.number,
                step=step,
                location=attempt.checkpoint_restored,
                restored_by=trained,
                committed_by=earlier[-1].number if earlier else None,
            )
        )
    return found


def attempt_rows(job: Job, until: datetime) -> list[AttemptRow]:
    """One row per attempt, then one per standby that hosted none, each with what its instances cost."""
    rows = []
    standby = [job.standby] if job.standby is not None else []
    hosted = [(a, False) for a in job.attempts]
    for attempt, unused in [*hosted, *[(a, True) for a in [*job.unused_instances, *standby]]]:
        cost = job_cost(attempt.billed(), now=until)
        rows.append(
            AttemptRow(
                number=attempt.number,
                instance_ids=attempt.instance_ids(),
                instance_type=attempt.instance_type,
                availability_zone=attempt.availability_zone,
                lifecycle=attempt.lifecycle,
                nodes=len(attempt.node_runs()),
                price_per_hour=attempt.price_per_hour,
                price_source=attempt.price_source,
                started_at=attempt.started_at,
                ended_at=attempt.ended_at,
                end_reason=attempt.end_reason,
                restored_step=attempt.restored_step,
                last_step=attempt.last_step,
                steps_lost=attempt.steps_lost,
                steps_lost_basis=attempt.steps_lost_basis,
                notice_checkpoint_committed=attempt.notice_checkpoint_committed,
                cost_usd=None if cost.unpriced_instances else cost.usd,
                unused=unused,
            )
        )
    return rows


def metric_summaries(metrics: dict[str, list[MetricPoint]]) -> list[MetricSummary]:
    """Each metric's last value (with its step), its range and its count of points, by name."""
    return [
        MetricSummary(
            name=name,
            points=len(points),
            last=points[-1].value,
            last_step=points[-1].step,
            minimum=min(p.value for p in points),
            maximum=max(p.value for p in points),
        )
        for name, points in sorted(metrics.items())
        if points
    ]


def _first_seen(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def build_report(
    job: Job, telemetry: JobTelemetry, now: datetime, telemetry_unavailable: str | None = None
) -> JobReport:
    """The report of ``job`` at ``now``.

    Parameters
    ----------
    job
        The job record (the API's view of it: ``spotrun.cli.api.as_job``).
    telemetry
        Its training metrics and GPU readings (``GET /jobs/{id}/telemetry``); empty when it reported none.
    now
        The end of what still runs (an open attempt's bar, its cost so far). A job that ended is drawn up to
        its end whatever ``now`` is, so the same record gives the same report.
    telemetry_unavailable
        Why the telemetry could not be read, when it could not (``telemetry`` is then empty): the report says so.

    Returns
    -------
    JobReport
        Pure data: the same inputs give an equal report.
    """
    ended = job.timeline[-1].at if job.status.is_terminal and job.timeline else None
    until = ended or now
    figures = summary_figures(job, until)
    if ended is not None:
        # An instance terminated after the job's end (a standby, a kept node) is billed up to its own end.
        until = max([until, *(i.ended_at for i in job.billed_instances() if i.ended_at is not None)])
    states = state_spans(job, until)
    spans = instance_spans(job, states, until)
    series, not_compared = cost_series(job.billed_instances(), job.created_at, max(until, job.created_at))
    found = sorted(events(job), key=lambda e: e.at)
    lost = [a.steps_lost for a in job.attempts if a.steps_lost is not None]
    return JobReport(
        job_id=job.job_id,
        name=job.name,
        status=job.status,
        error_type=job.error.type if job.error is not None else None,
        error_message=job.error.message if job.error is not None else None,
        created_at=job.created_at,
        ended_at=ended,
        generated_at=now,
        until=until,
        duration_seconds=figures["duration_seconds"],
        recoveries=figures["recoveries"],
        interruptions=job.interruptions,
        zones=_first_seen([span.availability_zone for span in spans if not span.unused]),
        pools=_first_seen([span.pool for span in spans]),
        states=states,
        instances=spans,
        events=found,
        restores=restores(job, states),
        attempts=attempt_rows(job, until),
        steps_trained_again=sum(lost) if lost else None,
        cost=job.cost if job.cost is not None else job_cost(job.billed_instances(), now=until),
        cost_series=series,
        cost_not_compared=(
            f"{not_compared} spot instance{'s' if not_compared != 1 else ''} without an on-demand price for "
            "its type in its region: counted at the price paid on both lines"
            if not_compared
            else None
        ),
        metrics=telemetry.metrics,
        metric_summaries=metric_summaries(telemetry.metrics),
        gpu=telemetry.gpu,
        telemetry_skipped_lines=telemetry.skipped_lines,
        telemetry_thinned=telemetry.thinned,
        telemetry_unavailable=telemetry_unavailable,
    )
