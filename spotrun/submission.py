"""Submitting a job: validate the manifest, record the job once, start its workflow once."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel

from spotrun.capacity import candidate_types
from spotrun.errors import ManifestInvalid, RequestRejected
from spotrun.job import JobError, ManifestSource, job_id_for, new_job, rejected_job
from spotrun.limits import admission_problems as budget_admission_problems
from spotrun.manifest import JobManifest
from spotrun.manifest_io import ManifestError, parse_manifest_text
from spotrun.ports import Objects, Workflows
from spotrun.shape import MANIFEST_PREFIX, REJECTION_SUFFIX
from spotrun.store import JobStore, update_job
from spotrun.timing import workflow_timing

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class SubmitOutcome(BaseModel):
    """What happened to one submission."""

    outcome: Literal["started", "duplicate", "rejected", "ignored"]
    job_id: str | None = None
    execution_arn: str | None = None
    reason: str | None = None


def is_manifest_key(key: str) -> bool:
    """Whether a key under the manifest prefix is a manifest (and not, say, our own rejection report)."""
    return (
        key.startswith(MANIFEST_PREFIX)
        and key.endswith(MANIFEST_SUFFIXES)
        and not key.endswith(REJECTION_SUFFIX)
    )


def admission_problems(manifest: JobManifest) -> list[str]:
    """Problems of a valid manifest that this deployment cannot run, found before anything starts.

    Parameters
    ----------
    manifest
        A manifest that passed validation.

    Returns
    -------
    list[str]
        One line per problem, each naming its field; empty when the job can run.
    """
    problems = []
    try:
        candidate_types(manifest.resources)
    except ManifestInvalid as exc:
        problems.append(f"resources: {exc}")
    if manifest.resources.nodes > 1:
        problems.append("resources.nodes: multi-node jobs are not supported by this version of spotrun yet")
    problems += budget_admission_problems(manifest)
    return problems


def rejection_report_key(manifest_key: str) -> str:
    """Where the report of a refused manifest goes: beside it, so the user sees it where they dropped it."""
    return manifest_key + REJECTION_SUFFIX


def submit_s3_manifest(
    *,
    source: ManifestSource,
    body: bytes,
    store: JobStore,
    objects: Objects,
    workflows: Workflows,
    state_machine_arn: str,
    time_scale: float,
    now: datetime,
) -> SubmitOutcome:
    """Handle a manifest dropped into the jobs bucket.

    Parameters
    ----------
    source
        Bucket, key and ETag of the object: a second delivery of the same object has the same identity.
    body
        The object's content.
    store, objects, workflows
        Ports to the job store, S3 and Step Functions.
    state_machine_arn
        The job workflow.
    time_scale
        The deployment's time-scale factor (1.0 on AWS).
    now
        The current time.

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
    try:
        manifest = parse_manifest_text(body)
    except ManifestError as exc:
        return _reject(source, exc.errors, store=store, objects=objects, now=now)
    problems = admission_problems(manifest)
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
    """Identity of an API submission: the Idempotency-Key header when given, else the manifest's hash."""
    if idempotency_key:
        return ManifestSource(kind="api", key=f"idempotency-key:{idempotency_key}")
    return ManifestSource(kind="api", key=f"sha256:{manifest_sha256(manifest)}")


def submit_api_manifest(
    manifest: JobManifest,
    *,
    idempotency_key: str | None,
    store: JobStore,
    workflows: Workflows,
    state_machine_arn: str,
    time_scale: float,
    now: datetime,
) -> SubmitOutcome:
    """Handle a manifest posted to the API.

    Unlike a dropped manifest, a refused one leaves no trace: the caller gets the problems in the answer.

    Returns
    -------
    SubmitOutcome
        ``started``, or ``duplicate`` (with the first job's id) when this submission's identity was seen before.

    Raises
    ------
    RequestRejected
        When the deployment cannot run the manifest; nothing is stored or started.
    """
    problems = admission_problems(manifest)
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
    manifest_doc = manifest.model_dump(mode="json")
    created = store.create(new_job(job_id, manifest.name, source, manifest_doc, now))
    if not created:
        existing = store.get(job_id)
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


def _record_execution(store: JobStore, job_id: str, execution_arn: str) -> None:
    update_job(store, job_id, lambda job: job.model_copy(update={"execution_arn": execution_arn}))


def _reject(
    source: ManifestSource, errors: list[str], *, store: JobStore, objects: Objects, now: datetime
) -> SubmitOutcome:
    assert source.key is not None
    assert source.bucket is not None
    name = PurePosixPath(source.key).stem
    job_id = job_id_for(name, source)
    error = JobError(
        type="Manifest.Invalid", message=f"{len(errors)} problem(s) in the manifest", details=errors
    )
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
