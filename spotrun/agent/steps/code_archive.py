"""``training.code`` on the instance: a prefix copied file by file, or one ``.tar.gz`` archive extracted.

An archive (what ``spotrun submit`` uploads from a workdir, ``code/<sha256>.tar.gz``) is staged like any object,
verified (against the SHA-256 its key names too), then extracted with :mod:`tarfile`'s ``data`` filter, which
strips a leading ``/`` and refuses ``..``, links leaving the directory and device files
(https://docs.python.org/3/library/tarfile.html#tarfile.data_filter). It is extracted into a new directory that
then replaces the code directory, so nothing is written through a link an earlier run left there, and a failed
extraction leaves no half of it behind.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import uuid
from pathlib import Path, PurePosixPath

from spotrun.agent.transfer.download import S3Reader, StageItem, StagingError, plan_input
from spotrun.model import layout
from spotrun.model.manifest.schema import split_s3_uri

# A content-addressed archive names its own SHA-256: code/<64 hex>.tar.gz.
_ADDRESSED = re.compile(rf"(?:^|/){re.escape(layout.CODE_PREFIX)}(?P<sha>[0-9a-f]{{64}})\.tar\.gz$")
ARCHIVE_NAME = ".code.tar.gz"


def archive_file(job_layout: layout.NvmeLayout) -> Path:
    """Where a code archive is downloaded before its extraction (beside the code directory, not in it)."""
    return job_layout.root / ARCHIVE_NAME


def plan_code(s3: S3Reader, uri: str, job_layout: layout.NvmeLayout) -> list[StageItem]:
    """What staging ``training.code`` copies: every object of a prefix into the code directory, or the archive.

    Parameters
    ----------
    s3
        The S3 client.
    uri
        ``training.code``: a prefix (a missing trailing ``/`` is added) or a key ending ``.tar.gz``.
    job_layout
        The job's directories.

    Returns
    -------
    list[StageItem]
        The files to copy; for an archive, the one file :func:`unpack_code` extracts afterwards.
    """
    bucket, key = split_s3_uri(uri)
    if not layout.is_code_archive_key(key):
        # A prefix; a missing trailing "/" must not turn it into one object.
        return plan_input(s3, uri if uri.endswith("/") else uri + "/", job_layout.code_dir)
    addressed = _ADDRESSED.search(key)
    return [StageItem(bucket, key, archive_file(job_layout), sha256=addressed["sha"] if addressed else None)]


def unpack_code(uri: str, job_layout: layout.NvmeLayout) -> int:
    """Extract the staged archive of ``training.code`` into the code directory (nothing for a prefix).

    Parameters
    ----------
    uri
        ``training.code``.
    job_layout
        The job's directories; the archive was staged by :func:`plan_code`.

    Returns
    -------
    int
        Files extracted (0 for a prefix).

    Raises
    ------
    StagingError
        When the archive is not a gzip tar, or a member would land outside the code directory (``..``, a link
        out of it) or is a device: nothing of it is kept then.
    """
    if not layout.is_code_archive_key(split_s3_uri(uri)[1]):
        return 0
    archive = archive_file(job_layout)
    fresh = job_layout.root / f".code-{uuid.uuid4().hex}"
    fresh.mkdir(mode=layout.DIRECTORY_MODE)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            tar.extractall(fresh, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        shutil.rmtree(fresh, ignore_errors=True)
        raise StagingError(f"training.code {uri}: cannot extract the archive: {exc}") from None
    old = job_layout.root / f".code-old-{uuid.uuid4().hex}"
    if job_layout.code_dir.exists() or job_layout.code_dir.is_symlink():
        job_layout.code_dir.rename(old)  # a link is moved, never followed
    fresh.rename(job_layout.code_dir)
    shutil.rmtree(old, ignore_errors=True)
    archive.unlink(missing_ok=True)
    return sum(1 for member in members if member.isfile() and PurePosixPath(member.name).parts)
