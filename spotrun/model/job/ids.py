"""Job ids: derived from the manifest's name and the submission's identity, so every step is idempotent."""

from __future__ import annotations

import re

from spotrun.model.job.record import ManifestSource


def job_id_for(name: str, source: ManifestSource) -> str:
    """Derive the job id from the manifest name and the submission's identity.

    The same submission always gets the same id, which makes every later step idempotent: a second delivery
    of the same S3 object finds the job already recorded, and Step Functions refuses a second execution of
    the same name.

    Parameters
    ----------
    name
        The manifest's name (or a placeholder for an unreadable manifest).
    source
        The submission's identity.

    Returns
    -------
    str
        ``<name>-<12 hex>``, at most 61 characters, valid as a Step Functions execution name.
    """
    return f"{_slug(name)}-{source.fingerprint()[:12]}"


def job_id_shape(name: str) -> str:
    """A stand-in as long as every id :func:`job_id_for` gives a manifest of this name (what admission sizes)."""
    return f"{_slug(name)}-{'0' * 12}"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:48] or "job"
