"""Scheduled retraining: schedules made from a manifest's ``schedule``, and what one firing does.

A schedule is an EventBridge Scheduler schedule in the deployment's group whose target is the ``scheduled_run``
function; its manifest is kept in the jobs bucket. Each firing is one run: a new job (one per scheduled time,
however often Scheduler delivers it) or, with ``only_if_data_changed``, a recorded skip when the inputs are
what they were for the last run that succeeded. The logic here is pure over ports.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Collection
from datetime import datetime
from typing import Any

from spotrun.control.ports import JobStore, ObjectMissing, Objects, Schedules, Workflows
from spotrun.control.schedules.run_records import RunRecord, RunRecords
from spotrun.control.schedules.view import ScheduleView
from spotrun.control.staged_sources import missing_sources
from spotrun.control.submission import admission_problems, manifest_sha256, start_job
from spotrun.model.base import DeferredModel
from spotrun.model.errors import RequestRejected, ScheduleNotFound
from spotrun.model.job.ids import job_id_for
from spotrun.model.job.record import ManifestSource
from spotrun.model.layout import schedule_manifest_key
from spotrun.model.manifest.parse import ManifestError, parse_manifest_text
from spotrun.model.manifest.schedule_expressions import InvalidExpression, next_fire, validate
from spotrun.model.manifest.schema import JobManifest, split_s3_uri

logger = logging.getLogger(__name__)

# What Scheduler sends the target: its context attributes are filled in at each firing (all as strings).
CONTEXT = {
    "schedule_arn": "<aws.scheduler.schedule-arn>",
    "scheduled_time": "<aws.scheduler.scheduled-time>",
    "execution_id": "<aws.scheduler.execution-id>",
    "attempt_number": "<aws.scheduler.attempt-number>",
}


class Invocation(DeferredModel):
    """What ``scheduled_run`` receives (see tests/events/scheduler-invocation.json)."""

    schedule: str
    manifest_key: str
    scheduled_time: str
    schedule_arn: str | None = None
    execution_id: str | None = None
    attempt_number: str | None = None


def _next(expression: str, timezone: str, now: datetime) -> datetime | None:
    try:
        return next_fire(expression, now, timezone)
    except InvalidExpression:
        return None  # L, W, #: valid for Scheduler, not computed here


def create_schedule(
    manifest: JobManifest,
    *,
    schedules: Schedules,
    objects: Objects,
    bucket: str,
    archive_buckets: Collection[str],
    now: datetime,
    secret_references: Collection[str] = (),
) -> ScheduleView:
    """Validate, store the manifest, create the schedule.

    Raises
    ------
    RequestRejected
        422 when the manifest has no schedule, an expression or time zone Scheduler would refuse, or problems
        the deployment cannot run; 409 when a schedule of that name exists. Nothing is created then.
    """
    spec = manifest.schedule
    if spec is None:
        raise RequestRejected("the manifest has no schedule", ["schedule: required to create a schedule"])
    try:
        validate(spec.expression, spec.timezone)
    except InvalidExpression as exc:
        raise RequestRejected(f"invalid schedule: {exc}", [f"schedule: {exc}"]) from exc
    # The schedule's manifest is kept in the jobs bucket (bucket): its jobs must reach only themselves there.
    problems = admission_problems(
        manifest, archive_buckets=archive_buckets, jobs_bucket=bucket, secret_references=secret_references
    )
    if problems:
        raise RequestRejected(f"{len(problems)} problem(s) in the manifest", problems)
    key = schedule_manifest_key(manifest.name, manifest_sha256(manifest)[:16])
    objects.put_json(bucket, key, manifest.model_dump(mode="json"))
    payload = {"schedule": manifest.name, "manifest_key": key, **CONTEXT}
    if not schedules.create(manifest.name, spec.expression, spec.timezone, payload):
        raise RequestRejected(
            f"a schedule named {manifest.name!r} exists already; delete it first", status=409
        )
    return ScheduleView(
        name=manifest.name,
        expression=spec.expression,
        timezone=spec.timezone,
        next_run=_next(spec.expression, spec.timezone, now),
    )


def list_schedules(schedules: Schedules, now: datetime) -> list[ScheduleView]:
    """Every schedule of the deployment, by name."""
    return [
        ScheduleView(
            name=item["name"],
            expression=item["expression"],
            timezone=item["timezone"],
            state=item["state"],
            next_run=_next(item["expression"], item["timezone"], now)
            if item["expression"].startswith("cron(")
            else None,
        )
        for item in schedules.list()
    ]


def delete_schedule(name: str, schedules: Schedules) -> None:
    """Delete a schedule (its run history stays). Raises ScheduleNotFound for an unknown name."""
    if not schedules.delete(name):
        raise ScheduleNotFound(f"no schedule {name}")


def schedule_runs(name: str, schedules: Schedules, records: RunRecords) -> list[RunRecord]:
    """A schedule's firings, newest first. Raises ScheduleNotFound when it neither exists nor ever ran."""
    runs = records.runs(name)
    if not runs and name not in {item["name"] for item in schedules.list()}:
        raise ScheduleNotFound(f"no schedule {name}")
    return runs


def input_prefixes(manifest: JobManifest) -> list[str]:
    """The S3 URIs a run reads: every data input, and the code prefix."""
    uris = [item.source for item in manifest.data.inputs]
    return uris + ([manifest.training.code] if manifest.training.code else [])


def fingerprint(manifest: JobManifest, objects: Objects) -> str:
    """A hash of (key, etag, size) of every object under the manifest's inputs: equal inputs, equal hash."""
    listing: list[Any] = []
    for uri in input_prefixes(manifest):
        bucket, prefix = split_s3_uri(uri)
        listing.append([uri, [list(item) for item in objects.list_versions(bucket, prefix)]])
    return hashlib.sha256(json.dumps(listing, separators=(",", ":")).encode()).hexdigest()


def should_skip(manifest: JobManifest, current: str, last_success: RunRecord | None) -> str | None:
    """Why this firing is skipped, or None when it runs."""
    if manifest.schedule is None or not manifest.schedule.only_if_data_changed or last_success is None:
        return None
    if last_success.fingerprint != current:
        return None
    return (
        f"inputs unchanged since the successful run of {last_success.scheduled_time} ({last_success.job_id})"
    )


def read_schedule_manifest(objects: Objects, bucket: str, key: str) -> JobManifest | str:
    """The schedule's stored manifest, or why a firing cannot run it (then the firing is recorded as skipped).

    Parameters
    ----------
    objects
        The jobs bucket's objects.
    bucket, key
        Where :func:`create_schedule` stored the manifest.

    Returns
    -------
    JobManifest | str
        The manifest; or, when the object is gone or no longer validates (a rule tightened since the schedule
        was made), a reason that says what to do.
    """
    try:
        return parse_manifest_text(objects.get_bytes(bucket, key))
    except ObjectMissing:
        return (
            f"not started: the schedule's manifest s3://{bucket}/{key} no longer exists; delete the schedule "
            "and create it again from its manifest"
        )
    except ManifestError as exc:
        return (
            f"not started: the schedule's manifest s3://{bucket}/{key} no longer validates ({exc}); delete the "
            "schedule and create it again from a corrected manifest"
        )


def _decide(
    invocation: Invocation, manifest: JobManifest, *, bucket: str, objects: Objects, records: RunRecords
) -> tuple[str | None, str]:
    """Why this firing of a readable manifest is skipped (None: it runs), and its inputs' fingerprint."""
    current = fingerprint(manifest, objects)
    reason = should_skip(manifest, current, records.last_success(invocation.schedule))
    missing = [] if reason else missing_sources(manifest, objects, jobs_bucket=bucket)
    if missing:
        # The run would fail at staging after buying an instance: it is not started, and says why.
        reason = "not started: " + "; ".join(missing)
    return reason, current


def run_scheduled(
    invocation: Invocation,
    *,
    bucket: str,
    objects: Objects,
    records: RunRecords,
    store: JobStore,
    workflows: Workflows,
    state_machine_arn: str,
    time_scale: float,
    now: datetime,
) -> RunRecord:
    """Handle one firing: skip it (recorded) or start its job, once per scheduled time."""
    seen = records.get_run(invocation.schedule, invocation.scheduled_time)
    manifest = read_schedule_manifest(objects, bucket, invocation.manifest_key)
    source = ManifestSource(kind="schedule", key=invocation.schedule, etag=invocation.scheduled_time)
    if seen is None:
        reason: str | None
        current: str | None
        if isinstance(manifest, str):
            reason, current = manifest, None
        else:
            reason, current = _decide(invocation, manifest, bucket=bucket, objects=objects, records=records)
        run = RunRecord(
            schedule=invocation.schedule,
            scheduled_time=invocation.scheduled_time,
            recorded_at=now,
            outcome="skipped" if reason else "started",
            job_id=None if reason or isinstance(manifest, str) else job_id_for(manifest.name, source),
            reason=reason,
            fingerprint=current,
        )
        # When a concurrent delivery recorded this firing first, follow its decision.
        recorded = records.add_run(run)
        seen = run if recorded else records.get_run(invocation.schedule, invocation.scheduled_time) or run
    if seen.outcome == "started":
        if isinstance(manifest, str):
            # A repeated delivery of a firing already started: its first delivery started the job (or, had it
            # died in between, this one cannot without the manifest); the record says what happened.
            logger.warning("schedule %s: %s", invocation.schedule, manifest)
            return seen
        # Idempotent per source: a repeated delivery finds the job and starts nothing new.
        start_job(
            manifest,
            source,
            store=store,
            workflows=workflows,
            state_machine_arn=state_machine_arn,
            time_scale=time_scale,
            now=now,
        )
    return seen
