"""Upload of a finished job's output directory and log, and the model's digest."""

from __future__ import annotations

import json
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from spotrun.agent.checkpoint_store import upload_regular
from spotrun.agent.links import LinkError, open_regular, regular_files
from spotrun.agent.secrets import Masker
from spotrun.agent.steps.digest import tree_digest
from spotrun.agent.supervision.log_notes import NOTE_PREFIX
from spotrun.agent.transfer.download import DEFAULT_WORKERS
from spotrun.agent.transfer.upload import PartUploader
from spotrun.model import layout
from spotrun.model.agent_protocol.command import OutputList, OutputObject

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelLocation:
    """Where the model went and its digest."""

    key: str  # the file's key, or the directory's prefix ending with "/"
    sha256: str


class ModelMissingError(RuntimeError):
    """The command exited 0 without writing the manifest's outputs.model."""


class OutputLinkError(RuntimeError):
    """The output directory is, or holds, a symbolic link: nothing of it is uploaded."""


def _upload(s3: Any, bucket: str, key: str, path: Path, parts: PartUploader) -> OutputObject:
    # One read of the file gives the SHA-256 listed here and the checksum S3 checks (spotrun.agent.transfer.upload).
    size, sha256 = upload_regular(s3, path, bucket, key, {}, parts)
    return OutputObject(key=key, size=size, sha256=sha256)


def upload_outputs(
    s3: Any, bucket: str, job_id: str, output_dir: Path, *, workers: int = DEFAULT_WORKERS
) -> list[OutputObject]:
    """Upload every file of ``output_dir`` under :func:`spotrun.model.layout.output_prefix`.

    Parameters
    ----------
    s3
        A boto3 S3 client.
    bucket
        The jobs bucket.
    job_id
        The job.
    output_dir
        The local output directory.
    workers
        Files uploaded at once.

    Returns
    -------
    list[OutputObject]
        One per file, sorted by key.

    Raises
    ------
    OutputLinkError
        When the directory is or holds a symbolic link, before anything is uploaded. Refused rather than
        skipped: the model is what the job delivers, and a model silently missing a file (or one that is a
        link's target, another job's or the instance's) must fail the step, with the link named.
    """
    prefix = layout.output_prefix(job_id)
    try:
        files = regular_files(output_dir)
    except LinkError as exc:
        raise OutputLinkError(f"outputs refused, nothing uploaded: {exc}") from None
    with (
        PartUploader() as parts,
        ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="output-up") as pool,
    ):
        futures = [
            pool.submit(_upload, s3, bucket, prefix + relative, path, parts) for relative, path in files
        ]
        try:
            return sorted((future.result() for future in futures), key=lambda item: item.key)
        except LinkError as exc:  # a file swapped for a link after the listing
            raise OutputLinkError(f"outputs refused: {exc}") from None


def write_output_list(
    s3: Any, bucket: str, job_id: str, attempt: int, outputs: list[OutputObject]
) -> OutputList:
    """Store the list of uploaded outputs in the jobs bucket; return the reference the workflow carries.

    Parameters
    ----------
    s3
        A boto3 S3 client.
    bucket, job_id, attempt
        The jobs bucket, the job and the attempt whose outputs these are.
    outputs
        What :func:`upload_outputs` returned.

    Returns
    -------
    OutputList
        The list's key (:func:`spotrun.model.layout.output_list_key`), its length and the files' total size.
    """
    key = layout.output_list_key(job_id, attempt)
    body = json.dumps([item.model_dump() for item in outputs], separators=(",", ":")).encode()
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")
    return OutputList(key=key, count=len(outputs), bytes=sum(item.size for item in outputs))


def locate_model(job_id: str, model: str, outputs: list[OutputObject]) -> ModelLocation:
    """Find the model among the uploaded outputs and compute its digest from theirs.

    Parameters
    ----------
    job_id
        The job.
    model
        The manifest's ``outputs.model``, relative to the output directory.
    outputs
        What :func:`upload_outputs` returned.

    Returns
    -------
    ModelLocation
        A file model: its key and SHA-256. A directory model: its prefix and the digest of
        :func:`spotrun.agent.steps.digest.tree_digest` over its files.

    Raises
    ------
    ModelMissingError
        When no uploaded file is the model or lies below it.
    """
    relative = PurePosixPath(model).as_posix().rstrip("/")
    file_key = layout.output_prefix(job_id) + relative
    by_key = {item.key: item for item in outputs}
    if file_key in by_key:
        return ModelLocation(file_key, by_key[file_key].sha256)
    directory = file_key + "/"
    below = {
        item.key.removeprefix(directory): item.sha256 for item in outputs if item.key.startswith(directory)
    }
    if not below:
        raise ModelMissingError(
            f"the command exited 0 but wrote no outputs.model ({model!r}) in SPOTRUN_OUTPUT_DIR"
        )
    return ModelLocation(directory, tree_digest(below))


def upload_log(
    s3: Any, bucket: str, job_id: str, attempt: int, path: Path, masker: Masker | None = None
) -> str | None:
    """Upload the attempt's training log; returns its key, or None if it could not be uploaded.

    A log replaced by a symbolic link (the training command can write the log directory) is skipped with a
    warning naming it, never followed: the log only helps a human, and losing it must not change the report.
    With a ``masker`` holding the job's secrets, the copy uploaded has every value masked (the file on the
    instance is left as written).
    """
    key = layout.log_key(job_id, attempt)
    extra = {"ContentType": "text/plain; charset=utf-8"}
    try:
        if masker:
            _upload_masked(s3, path, bucket, key, extra, masker)
        else:
            upload_regular(s3, path, bucket, key, extra)
    except LinkError as exc:
        logger.warning("training log not uploaded: %s", exc)
        return None
    except Exception as exc:  # the log helps a human; losing it must not change what is reported
        logger.warning("could not upload the training log: %s", exc)
        return None
    return key


def _upload_masked(s3: Any, path: Path, bucket: str, key: str, extra: dict[str, str], masker: Masker) -> None:
    # Line by line into an anonymous file (not in the job's directories, which its commands can write): a log
    # may be larger than memory, and each line of a value of several lines is masked on its own.
    with open_regular(path) as source, tempfile.TemporaryFile() as masked:
        for line in source:
            masked.write(masker.mask_bytes(line))
        masked.seek(0)
        s3.upload_fileobj(masked, bucket, key, ExtraArgs=extra)


# How far before a log's tail secret values are looked for, so one that ends in the tail is masked whole: the
# largest secret value (a Secrets Manager SecretString holds at most 65,536 bytes).
MASK_LOOKBEHIND = 64 * 1024


def log_tail(path: Path, *, max_lines: int = 40, max_bytes: int = 4096, masker: Masker | None = None) -> str:
    """The end of a log: at most ``max_lines`` lines and ``max_bytes`` bytes, decoded leniently.

    The line cut at the start is dropped, unless no line of the command's own output would remain (one last
    line longer than ``max_bytes``, maybe followed by the agent's notes): then its end is kept, after ``...``, since
    it is what the command said last. A log replaced by a symbolic link has no tail: its target's content would
    travel in the failure cause. With a ``masker``, secret values are masked before the cut, in a window
    :data:`MASK_LOOKBEHIND` bytes longer, so a value that ends in the tail is masked whole.
    """
    window = max_bytes + (MASK_LOOKBEHIND if masker else 0)
    try:
        with open_regular(path) as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - window))
            data = handle.read()
    except (FileNotFoundError, LinkError):
        return ""
    from_start = size <= window  # the data begins with the log's first byte
    if masker:
        data = masker.mask_bytes(data)
        if not from_start:
            # A value cut by the window's start is left unmasked there; it ends within MASK_LOOKBEHIND bytes.
            data = data[MASK_LOOKBEHIND:]
    if len(data) > max_bytes:
        whole = data[-max_bytes - 1 : -max_bytes] == b"\n"
        data = data[-max_bytes:]
    else:
        whole = from_start
    tail = data.decode("utf-8", errors="replace")
    if not whole:
        first, _, rest = tail.partition("\n")
        if any(line.strip() and not line.startswith(NOTE_PREFIX) for line in rest.splitlines()):
            tail = rest
        else:
            tail = "..." + first[3:] + ("\n" + rest if rest else "")  # the cut shown, within max_bytes
    return "\n".join(tail.splitlines()[-max_lines:])
