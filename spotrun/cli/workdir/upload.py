"""``training.workdir`` resolved by the CLI: pack the directory, upload it content-addressed, set ``training.code``.

The CLI holds no S3 permission of its own: ``POST /code`` answers with the archive's URI and, unless the jobs
bucket holds it already, a presigned PUT of exactly those bytes (:mod:`spotrun.control.code_upload`). The upload
shows a progress bar on a terminal, on stderr when stdout carries JSON.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, BinaryIO

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from spotrun.cli.client import ApiError, SpotrunClient
from spotrun.cli.workdir.pack import DEFAULT_MAX_BYTES, PackedWorkdir, packed

UPLOAD_TIMEOUT_SECONDS = 600.0


def workdir_of(manifest: dict[str, Any], manifest_file: Path | None, override: Path | None) -> Path | None:
    """The directory to pack: ``override`` (``--workdir``), else the manifest's ``training.workdir``.

    A relative ``training.workdir`` is relative to the manifest file's directory (as in docker-compose); a
    relative ``--workdir`` to the current directory, like any path on the command line.
    """
    if override is not None:
        return override.resolve()
    written = manifest.get("training", {}).get("workdir")
    if written is None:
        return None
    base = manifest_file.resolve().parent if manifest_file is not None else Path.cwd()
    return (base / written).resolve()


class _Reading:
    """A file whose reads advance a progress bar (http.client sends a file body by reading it in blocks)."""

    def __init__(self, handle: BinaryIO, progress: Progress, task: Any):
        self._handle, self._progress, self._task = handle, progress, task

    def read(self, size: int = -1) -> bytes:
        chunk = self._handle.read(size)
        self._progress.advance(self._task, len(chunk))
        return chunk


def put_archive(archive: PackedWorkdir, upload: dict[str, Any], console: Console) -> None:
    """PUT the archive to the presigned URL with the headers it signed, with a progress bar on a terminal.

    Raises
    ------
    ApiError
        When S3 refuses the upload (its message) or cannot be reached (status 0).
    """
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
    )
    with (
        Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress,
        archive.path.open("rb") as handle,
    ):
        task = progress.add_task("uploading code", total=archive.size)
        request = urllib.request.Request(  # noqa: S310 - the URL is the API's presigned S3 URL
            upload["url"],
            data=_Reading(handle, progress, task),
            method="PUT",
            headers=dict(upload["headers"]),
        )
        try:
            with urllib.request.urlopen(request, timeout=UPLOAD_TIMEOUT_SECONDS):  # noqa: S310
                pass
        except urllib.error.HTTPError as exc:
            raise ApiError(
                exc.code, f"S3 refused the code upload: {exc.read()[:500].decode(errors='replace')}"
            ) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise ApiError(0, f"could not upload the code: {getattr(exc, 'reason', exc)}") from None


def resolve_workdir(
    manifest: dict[str, Any],
    directory: Path,
    client: SpotrunClient,
    console: Console,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[str, Any]:
    """Pack ``directory``, upload it unless the jobs bucket has it, and return the manifest to submit.

    Parameters
    ----------
    manifest
        The manifest as the API takes it (validated).
    directory
        The workdir.
    client
        The API.
    console
        Where the progress and the one line saying what was uploaded go.
    max_bytes
        The most unpacked bytes accepted (:func:`spotrun.cli.workdir.pack.packed`).

    Returns
    -------
    dict
        ``manifest`` with ``training.code`` the archive's URI and no ``training.workdir``.

    Raises
    ------
    spotrun.cli.workdir.pack.WorkdirError
        When the directory cannot be packed.
    ApiError
        When the API or S3 refuses.
    """
    with packed(directory, max_bytes) as archive:
        answer = client.code_upload(archive.sha256, archive.size)
        size = f"{archive.files} files, {archive.size / 1024:.1f} KiB packed"
        if answer.get("upload"):
            put_archive(archive, answer["upload"], console)
            console.print(f"code uploaded: {answer['uri']} ({size})", soft_wrap=True, highlight=False)
        else:
            console.print(f"code unchanged: {answer['uri']} ({size})", soft_wrap=True, highlight=False)
    training = {key: value for key, value in manifest["training"].items() if key != "workdir"}
    return {**manifest, "training": {**training, "code": answer["uri"]}}
