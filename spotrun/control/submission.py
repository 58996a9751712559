"""Submitting a job: validate the manifest, record the job once, start its workflow once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Literal

from spotrun.control.ports import JobStore, Objects, Workflows
from spotrun.control.staged_sources import missing_sources
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.session_policy import JobAccessRefused, job_session_policy
from spotrun.model.base import DeferredModel
from spotrun.model.capacity.candidates import candidate_types
from spotrun.model.deadline.stored_job import ASSUMED, feasibility_problem, with_feasibility_note
from spotrun.model.errors import ManifestInvalid, RequestRejected
from spotrun.model.job.ids import job_id_for, job_id_shape
from spotrun.model.job.limits import admission_problems as budget_admission_problems
from spotrun.model.job.record import Job, JobError, ManifestSource, new_job, rejected_job
from spotrun.model.layout import is_manifest_key, rejection_report_key
from spotrun.model.manifest.deadline import is_absolute
from spotrun.model.manifest.parse import MAX_MANIFEST_BYTES, ManifestError, parse_manifest_text
from spotrun.model.manifest.schema import JobManifest, split_s3_uri
from spotrun.model.manifest.secrets import admission_problems as secret_admission_problems
from spotrun.model.timing import workflow_timing


class SubmitOutcome(DeferredModel):
    """What happened to one submission."""

    outcome: Literal["started", "duplicate", "rejected", "ignored"]
    job_id: str | None = None
    execution_arn: str | None = None
    reason: str | None = None


SCHEDULE_REFUSED = (
    "schedule: a manifest with a schedule is not run from here; create its schedule with POST /schedules "
    "(`spotrun schedule create FILE`), or remove the schedule block to run the job once now"
)


WORKDIR_REFUSED = (
    "training.workdir: {workdir!r} is a directory on the machine that wrote the manifest, which the control "
    "plane cannot read; use `spotrun submit FILE` or `spotrun schedule create FILE` (they pack and upload the "
    "directory and set training.code), or replace workdir with code: s3://..."
)


_ANY_INSTANT = datetime(2000, 1, 1, tzinfo=UTC)


def admission_problems(
    manifest: JobManifest,
    *,
    archive_buckets: Collection[str],
    jobs_bucket: str | None = None,
    now: datetime | None = None,
    time_scale: float = 1.0,
    secret_references: Collection[str] = (),
) -> list[str]:
    """Problems of a valid manifest that this deployment cannot run, found before anything starts.

    Parameters
    ----------
    manifest
        A manifest that passed validation.
    archive_buckets
        The buckets this deployment may archive models to and restore them from (its own archive bucket and
        the deployer's ``archive_buckets`` option): the only ones its functions are granted.
    jobs_bucket
        The deployment's jobs bucket, when known: a job whose inputs or code lie under its ``jobs/`` (other
        jobs' objects), or whose S3 access is too large for a session policy, could never get its credentials
        (:func:`spotrun.model.agent_protocol.session_policy.job_session_policy`), so it is refused here,
        before it starts.
    now
        The submission time, which an absolute ``capacity.deadline`` is measured from; a schedule's runs (whose
        deadline can only be a duration) pass None.
    time_scale
        The emulator's factor, which the deadline's assumed AWS durations are scaled by (1.0 on AWS).
    secret_references
        The ARN patterns of the secrets this deployment's jobs may read (the deployer's ``secret_references``
        option, the job-access role's ceiling): a reference of ``training.secrets`` outside them is refused.

    Returns
    -------
    list[str]
        One line per problem, each naming its field; empty when the job can run.
    """
    problems = []
    stored = len(json.dumps(manifest.model_dump(mode="json"), separators=(",", ":")).encode())
    if stored > MAX_MANIFEST_BYTES:
        # The job record holds the manifest: a short text can still be long as JSON (a list of thousands of
        # one-letter arguments, aliases), and DynamoDB refuses items past 400 KB.
        problems.append(
            f"(manifest): {stored} bytes once written out as JSON; at most {MAX_MANIFEST_BYTES} (256 KiB) "
            "are stored with the job"
        )
    try:
        candidate_types(manifest.resources)
    except ManifestInvalid as exc:
        problems.append(f"resources: {exc}")
    problems += budget_admission_problems(manifest)
    deadline = manifest.capacity.deadline
    if deadline is not None and (now is not None or not is_absolute(deadline)):
        # A duration's feasibility does not depend on when it starts: any instant stands for the submission.
        late = feasibility_problem(manifest, now or _ANY_INSTANT, ASSUMED.scaled(time_scale))
        if late is not None:
            problems.append(late)
    if manifest.training.workdir is not None:
        # Only the CLI resolves it (spotrun.cli.workdir.pack): dropping it here would run the job without its code.
        problems.append(WORKDIR_REFUSED.format(workdir=manifest.training.workdir))
    if jobs_bucket:
        try:
            # The policy's length is what is refused: an id as long as the job's will be, and the largest
            # attempt number, stand in.
            job_session_policy(job_id_shape(manifest.name), 9999, manifest, jobs_bucket=jobs_bucket)
        except JobAccessRefused as exc:
            problems.append(f"data.inputs / training.code: {exc}")
    problems += secret_admission_problems(manifest.training.secrets, secret_references)
    destination = manifest.archive.destination
    if destination is not None and split_s3_uri(destination)[0] not in archive_buckets:
        allowed = ", ".join(sorted(archive_buckets)) or "(none)"
        problems.append(
            f"archive.destination: the bucket {split_s3_uri(destination)[0]!r} is not an archive bucket of "
            f"this deployment (allowed: {allowed}); leave destination out to use the deployment's archive "
            "bucket, or have the deployer add the bucket to the CDK option archive_buckets"
        )
    return problems


def entry_problems(
    manifest: JobManifest,
    *,
    objects: Objects,
    archive_buckets: Collection[str],
    jobs_bucket: str | None = None,
    now: datetime,
    time_scale: float,
    secret_references: Collection[str] = (),
) -> list[str]:
    """:func:`admission_problems` of a manifest that runs once now (dropped in S3 or POSTed to /jobs).

    A ``schedule`` there would be dropped silently: it is refused, pointing at the schedules API. Data inputs
    and code that do not exist are refused too (:func:`spotrun.control.staged_sources.missing_sources`):
    the job would fail at staging, after an instance was bought for it.
    """
    problems = admission_problems(
        manifest,
        archive_buckets=archive_buckets,
        jobs_bucket=jobs_bucket,
        now=now,
        time_scale=time_scale,
        secret_references=secret_references,
    )
    if manifest.schedule is not None:
        problems.append(SCHEDULE_REFUSED)
    if manifest.training.workdir is None:
        # A workdir is refused above; its code (none yet) is not a missing source on top of that.
        problems += missing_sources(manifest, objects, jobs_bucket=jobs_bucket)
    return problems


def submit_s3_manifest(
    *,
    source: ManifestSource,
    body: bytes | None,
    size: int,
    store: JobStore,
    objects: Objects,
    workflows: Workflows,
    state_machine_arn: str,
    time_scale: float,
    archive_buckets: Collection[str],
    now: datetime,
    secret_references: Collection[str] = (),
) -> SubmitOutcome:
    """Handle a manifest dropped into the jobs bucket.

    Parameters
    ----------
    source
        Bucket, key and ETag of the object: a second delivery of the same object has the same identity.
    body
        The object's content; ``None`` when it was not read because ``size`` passes the limit.
    size
        The object's size in bytes (from the event): an object above :data:`MAX_MANIFEST_BYTES` is refused
        without being read.
    store, objects, workflows
        Ports to the job store, S3 and Step Functions.
    state_machine_arn
        The job workflow.
    time_scale
        The deployment's time-scale factor (1.0 on AWS).
    archive_buckets
        The buckets an ``archive.destination`` may name.
    now
        The current time.
    secret_references
        The deployment's patterns of allowed ``training.secrets`` references.

    Returns
    -------
    SubmitOutcome
        ``started`` for a new job, ``duplicate`` when this submission was seen before (nothing new started),
        ``rejected`` with the report's key when the manifest is invalid, ``ignored`` for keys that are not
        manifests.
    """
    assert source.key is not None
    assert source.bucket is not None
    if not is_manifest_key(source.key):
        return SubmitOutcome(outcome="ignored", reason=f"{source.key} is not a manifest")
    if body is None or size > MAX_MANIFEST_BYTES or len(body) > MAX_MANIFEST_BYTES:
        too_big = (
            f"(manifest): the object is {max(size, len(body or b''))} bytes; a manifest may hold at most "
            f"{MAX_MANIFEST_BYTES} bytes (256 KiB), and a larger one is not read"
        )
        return _reject(source, [too_big], store=store, objects=objects, now=now)
    try:
        manifest = parse_manifest_text(body)
    except ManifestError as exc:
        return _reject(source, exc.errors, store=store, objects=objects, now=now, count=exc.count)
    # A manifest is dropped into the jobs bucket itself.
    problems = entry_problems(
        manifest,
        objects=objects,
        archive_buckets=archive_buckets,
        jobs_bucket=source.bucket,
        now=now,
        time_scale=time_scale,
        secret_references=secret_references,
    )
    if problems:
        return _reject(source, problems, store=store, objects=objects, now=now)

    return start_job(
        manifest,
        source,
        store=store,
        workflows=workflows,
        state_machine_arn=state_machine_arn,
        time_scale=time_scale,
        now=now,
    )


def manifest_sha256(manifest: JobManifest) -> str:
    """The sha256 of the manifest's canonical JSON (sorted keys, no spaces): equal manifests, equal hashes."""
    canonical = json.dumps(manifest.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def api_source(manifest: JobManifest, idempotency_key: str | None) -> ManifestSource:
    """Identity of an API submission: the Idempotency-Key header when given, else the manifest's hash.

    The manifest's hash travels with the source either way: the job id derives from the key alone, so a key
    reused with another manifest, once its idempotency record has expired, is recognised by the stored hash.
    """
    digest = manifest_sha256(manifest)
    key = f"idempotency-key:{idempotency_key}" if idempotency_key else f"sha256:{digest}"
    return ManifestSource(kind="api", key=key, manifest_sha256=digest)


def submit_api_manifest(
    manifest: JobManifest,
    *,
    idempotency_key: str | None,
    store: JobStore,
    objects: Objects,
    workflows: Workflows,
    state_machine_arn: str,
    time_scale: float,
    archive_buckets: Collection[str],
    now: datetime,
    jobs_bucket: str | None = None,
    secret_references: Collection[str] = (),
) -> SubmitOutcome:
    """Handle a manifest posted to the API (``jobs_bucket``, ``secret_references``: see :func:`admission_problems`).

    ``objects`` is S3, where its data inputs and code must exist (:func:`entry_problems`). Unlike a dropped
    manifest, a refused one leaves no trace: the caller gets the problems in the answer.

    Returns
    -------
    SubmitOutcome
        ``started``, or ``duplicate`` (with the first job's id) when this submission's identity was seen before.

    Raises
    ------
    RequestRejected
        When the deployment cannot run the manifest (422), or the Idempotency-Key names a job of another
        manifest (409); nothing is stored or started.
    """
    problems = entry_problems(
        manifest,
        objects=objects,
        archive_buckets=archive_buckets,
        jobs_bucket=jobs_bucket,
        now=now,
        time_scale=time_scale,
        secret_references=secret_references,
    )
    if problems:
        raise RequestRejected(f"{len(problems)} problem(s) in the manifest", problems)
    return start_job(
        manifest,
        api_source(manifest, idempotency_key),
        store=store,
        workflows=workflows,
        state_machine_arn=state_machine_arn,
        time_scale=time_scale,
        now=now,
    )


def start_job(
    manifest: JobManifest,
    source: ManifestSource,
    *,
    store: JobStore,
    workflows: Workflows,
    state_machine_arn: str,
    time_scale: float,
    now: datetime,
) -> SubmitOutcome:
    """Record the job of a valid manifest once and start its workflow once (idempotent per ``source``)."""
    job_id = job_id_for(manifest.name, source)
    created = store.create(with_feasibility_note(new_job(job_id, manifest.name, source, manifest, now)))
    if not created:
        existing = store.get(job_id)
        if _other_manifest(existing, source):
            raise RequestRejected(
                f"this Idempotency-Key was used with a different manifest (job {job_id}); use a new key",
                status=409,
            )
        if existing is not None and existing.execution_arn is not None:
            return SubmitOutcome(outcome="duplicate", job_id=job_id, execution_arn=existing.execution_arn)
        # The first delivery recorded the job but may have died before starting it. Starting again is safe:
        # Step Functions refuses a second execution of the same name.
    payload = {"job_id": job_id, "timing": workflow_timing(manifest, time_scale).model_dump()}
    execution_arn = workflows.start(state_machine_arn, job_id, payload)
    _record_execution(store, job_id, execution_arn)
    return SubmitOutcome(
        outcome="started" if created else "duplicate", job_id=job_id, execution_arn=execution_arn
    )


def _other_manifest(existing: Job | None, source: ManifestSource) -> bool:
    """Whether the recorded job of this identity was submitted with another manifest than ``source``'s."""
    if existing is None or source.manifest_sha256 is None or existing.source.manifest_sha256 is None:
        return False
    return existing.source.manifest_sha256 != source.manifest_sha256


def _record_execution(store: JobStore, job_id: str, execution_arn: str) -> None:
    update_job(store, job_id, lambda job: job.model_copy(update={"execution_arn": execution_arn}))


def _reject(
    source: ManifestSource,
    errors: list[str],
    *,
    store: JobStore,
    objects: Objects,
    now: datetime,
    count: int | None = None,
) -> SubmitOutcome:
    assert source.key is not None
    assert source.bucket is not None
    name = PurePosixPath(source.key).stem
    job_id = job_id_for(name, source)
    # The record and the report stay far below DynamoDB's 400 KB item limit whatever the manifest held: a
    # ManifestError's lines come bounded (with the count of all), admission problems are a few short lines.
    count = len(errors) if count is None else count
    error = JobError(type="Manifest.Invalid", message=f"{count} problem(s) in the manifest", details=errors)
    store.create(rejected_job(job_id, name, source, error, now))
    report_key = rejection_report_key(source.key)
    objects.put_json(
        source.bucket,
        report_key,
        {
            "manifest": f"s3://{source.bucket}/{source.key}",
            "job_id": job_id,
            "status": "REJECTED",
            "rejected_at": now.isoformat(),
            "errors": errors,
            "help": "Fix the fields named above and upload the manifest again; `spotrun validate FILE` checks it.",
        },
    )
    return SubmitOutcome(outcome="rejected", job_id=job_id, reason=report_key)
