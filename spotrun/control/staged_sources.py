"""Admission of a job's data inputs and code: each must exist before an instance is bought for it.

A job whose input or code is missing would fail at staging, after paying for an instance's boot; it is refused
at submission instead, at every entry point (:mod:`spotrun.control.submission`, and the schedules when they
fire). "Exists" means: a source that names an object (``s3://b/data.csv``, a code ``.tar.gz``) is that object;
a prefix (a key ending in ``/``, the code when it is not an archive) holds at least one object. What is an
object and what a prefix is the job's own S3 access rule
(:func:`spotrun.model.agent_protocol.session_policy.staged_sources`): the check lists exactly what the job's
instance will read, with ``s3:ListBucket`` only.
"""

from __future__ import annotations

from spotrun.control.ports import Objects, ObjectsUnreadable
from spotrun.model.agent_protocol.session_policy import StagedSource, overlaps_jobs, staged_sources
from spotrun.model.manifest.schema import JobManifest


def missing_source_problem(source: StagedSource, objects: Objects) -> str | None:
    """Why one staged source cannot be staged (it does not exist, or cannot be listed), or None.

    Parameters
    ----------
    source
        A data input or the code, as the job's instance stages it.
    objects
        Port to S3 (``first_key``: one ListObjectsV2 of one key).

    Returns
    -------
    str | None
        One line naming the field, or None when the object exists or the prefix holds an object.
    """
    try:
        first = objects.first_key(source.bucket, source.key)
    except ObjectsUnreadable as exc:
        return f"{source.field}: {source.uri} cannot be checked: {exc}"
    if source.is_prefix:
        if first is None:
            return (
                f"{source.field}: no object under {source.uri}; staging would find nothing to copy. Upload "
                "the data first (aws s3 cp --recursive DIR URI), or fix the prefix"
            )
        return None
    if first != source.key:
        # The first key at or under an object's key is that object when it exists (S3 lists in key order).
        hint = (
            f" (a prefix? end it with /: {source.uri}/)"
            if first and first.startswith(f"{source.key}/")
            else ""
        )
        return f"{source.field}: no object {source.uri}{hint}; upload it first, or fix the URI"
    return None


def missing_sources(manifest: JobManifest, objects: Objects, *, jobs_bucket: str | None) -> list[str]:
    """Every data input and code source of ``manifest`` that would fail at staging, one line each.

    A source under the jobs bucket's ``jobs/`` is refused by admission already (no job may read it) and is
    not listed: the check reads only what the job itself could.
    """
    sources = [
        source
        for source in staged_sources(manifest)
        if not (jobs_bucket and overlaps_jobs(source, jobs_bucket))
    ]
    problems = (missing_source_problem(source, objects) for source in sources)
    return [problem for problem in problems if problem is not None]
