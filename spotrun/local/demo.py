"""The demo scenario: one real training job through the whole control plane, in the embedded runtime.

Used by ``spotrun demo`` and by the end-to-end tests, so what the tests prove is what users see.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from botocore.exceptions import ClientError

from spotrun.agent.checkpoint_store import latest_committed
from spotrun.aws.adapters import job_store
from spotrun.local.chaos.injector import Progress, ProgressSource
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.ids import job_id_for
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.model.layout import MANIFEST_PREFIX, progress_key
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.shape import REPO_ROOT, SERVICE_NAME

EXAMPLES_DIR = REPO_ROOT / "examples"
DEFAULT_EXAMPLE = "tiny-regression"
EXAMPLE_DIR = EXAMPLES_DIR / DEFAULT_EXAMPLE
EXAMPLE_PREFIX = "examples/tiny-regression/"
DEMO_TIME_SCALE = 0.02
# train.py's default --steps, used when the manifest's command does not pass one.
EXAMPLE_DEFAULT_STEPS = 300


def available_examples() -> list[str]:
    """The examples ``spotrun demo --example`` runs: every directory of ``examples/`` holding a manifest."""
    return sorted(path.parent.name for path in EXAMPLES_DIR.glob("*/manifest.yaml"))


def example_dir(name: str) -> Path:
    """The directory of the example ``name``.

    Raises
    ------
    ValueError
        When there is no such example; the message lists the available ones.
    """
    available = available_examples()
    if name not in available:
        raise ValueError(f"no example {name!r} in {EXAMPLES_DIR}; available: {', '.join(available)}")
    directory = EXAMPLES_DIR / name
    if missing := missing_requirements(directory):
        # The emulator's instances run the example with this interpreter: its setup's pip would otherwise fetch
        # what is missing (PyPI's torch is a CUDA build of several GB) into this environment.
        raise ValueError(
            f"example {name!r} needs {', '.join(missing)}, not installed here: "
            "pip install 'spotrun[train]' (make test's environment has them)"
        )
    return directory


def missing_requirements(directory: Path) -> list[str]:
    """The distributions the example's ``requirements.txt`` names that this interpreter does not have.

    Only the names are checked (not the versions): enough to tell a missing framework from a present one.
    """
    requirements = directory / "requirements.txt"
    if not requirements.is_file():
        return []
    missing = []
    for line in requirements.read_text().splitlines():
        name = _REQUIREMENT_NAME.match(line.split("#", 1)[0].strip())
        if name is None:
            continue
        try:
            metadata.distribution(name.group(0))
        except metadata.PackageNotFoundError:
            missing.append(name.group(0))
    return missing


# A requirement line's distribution name (PEP 508), before any extras, version or marker.
_REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Submitted:
    """A manifest put into the jobs bucket."""

    job_id: str
    key: str
    etag: str


@contextmanager
def control_plane_logs(path: Path) -> Iterator[None]:
    """Send the control plane's logs and metrics (Powertools prints both to stdout) to ``path``.

    In the emulator the Lambda handlers run in this process; on a terminal their JSON lines would bury the
    progress view, so the demo keeps them in a file, as CloudWatch Logs would. Enter it *before* the runtime
    starts and leave it *after* the runtime has stopped, so that nothing the control plane does can log past
    the file's end.

    On exit every logging handler that writes to the file goes back to the stream it had before, or to the
    stdout of before the redirection when it was created during it (Powertools' ``Logger`` takes
    ``sys.stdout`` when it is first built, which is the file if a handler module was first imported here).
    None is left on the closed file, so a second run in the same process logs normally.
    """
    spotrun_logger = logging.getLogger(SERVICE_NAME)
    outer_stdout = sys.stdout
    path.parent.mkdir(parents=True, exist_ok=True)  # entered before the runtime, which would create it
    with (
        path.open("a", encoding="utf-8") as sink,
        contextlib.redirect_stdout(sink),
        warnings.catch_warnings(),
    ):
        # Handlers that published no metric on a path say so on stderr; that belongs in the log, not the view.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        previous = {
            handler: handler.setStream(sink)
            for handler in spotrun_logger.handlers
            if isinstance(handler, logging.StreamHandler)
        }
        try:
            yield
        finally:
            for handler in _stream_handlers():
                if handler.stream is sink:
                    before = previous.get(handler)
                    handler.setStream(before if before is not None and not before.closed else outer_stdout)


def _stream_handlers() -> list[logging.StreamHandler]:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return [
        handler
        for logger in loggers
        if isinstance(logger, logging.Logger)
        for handler in logger.handlers
        if isinstance(handler, logging.StreamHandler)
    ]


@contextmanager
def local_runtime(
    workdir: Path | None = None, time_scale: float = DEMO_TIME_SCALE, log_file: Path | None = None
) -> Iterator[LocalRuntime]:
    """Start the embedded runtime in ``workdir`` (a temporary directory by default), stop it on exit.

    Parameters
    ----------
    workdir
        The emulator's files; a temporary directory when omitted.
    time_scale
        Real seconds per simulated second.
    log_file
        When given, the control plane's logs and metrics go there (see :func:`control_plane_logs`) from before
        the runtime starts until after it has stopped, so that nothing its shutdown logs reaches the terminal
        or a closed file.

    Yields
    ------
    LocalRuntime
        The started runtime.
    """
    with tempfile.TemporaryDirectory(prefix="spotrun-") as scratch:
        logs = control_plane_logs(log_file) if log_file is not None else contextlib.nullcontext()
        runtime = LocalRuntime(workdir=workdir or Path(scratch), time_scale=time_scale)
        with logs, runtime:
            yield runtime


def upload_example(runtime: LocalRuntime, example_dir: Path = EXAMPLE_DIR) -> None:
    """Put the example's code and freshly generated data into the jobs bucket, as a user would."""
    s3 = runtime.client("s3")
    bucket = runtime.settings.jobs_bucket
    for path in sorted(example_dir.glob("*.py")):
        s3.put_object(
            Bucket=bucket,
            Key=f"{EXAMPLE_PREFIX}code/{path.name}",
            Body=path.read_bytes(),
            ChecksumAlgorithm="SHA256",
        )
    with tempfile.TemporaryDirectory() as data_dir:
        subprocess.run(
            [sys.executable, str(example_dir / "generate_data.py"), data_dir], check=True, capture_output=True
        )
        for path in sorted(Path(data_dir).rglob("*")):
            if path.is_file():
                key = f"{EXAMPLE_PREFIX}data/{path.relative_to(data_dir).as_posix()}"
                s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ChecksumAlgorithm="SHA256")


def drop_manifest(runtime: LocalRuntime, body: bytes, name: str) -> Submitted:
    """Put a manifest under ``manifests/``; the S3 event starts the job. Returns the job id it will get."""
    key = f"{MANIFEST_PREFIX}{name}"
    bucket = runtime.settings.jobs_bucket
    answer = runtime.client("s3").put_object(Bucket=bucket, Key=key, Body=body)
    etag = answer["ETag"].strip('"')
    source = ManifestSource(kind="s3", bucket=bucket, key=key, etag=etag)
    try:
        job_name = parse_manifest_text(body).name
    except ValueError:
        job_name = Path(key).stem
    return Submitted(job_id=job_id_for(job_name, source), key=key, etag=etag)


def wait_for_job(
    runtime: LocalRuntime,
    job_id: str,
    *,
    timeout: float = 300.0,
    on_change: Callable[[Job], None] | None = None,
    poll: float = 0.2,
) -> Job:
    """Poll the job store until the job is terminal and its workflow has ended; return the final record.

    The record turns terminal inside the workflow's last task, which still logs and publishes its metrics
    afterwards: returning before the execution ends would let that output land after whatever the caller
    prints next (the demo's summary), or in a log stream the caller has already closed.

    Parameters
    ----------
    runtime
        The runtime the job runs in.
    job_id
        The job.
    timeout
        Seconds to wait in all.
    on_change
        Called with the record whenever its version changes.
    poll
        Seconds between reads.

    Returns
    -------
    Job
        The record once the job is terminal and its execution (if it had one) is no longer running.

    Raises
    ------
    TimeoutError
        When that does not happen within ``timeout`` seconds.
    """
    store = job_store(runtime.settings.jobs_table, runtime.settings.region)
    deadline = time.monotonic() + timeout
    seen_version = -1
    while time.monotonic() < deadline:
        job = store.get(job_id)
        if job is not None and job.version != seen_version:
            seen_version = job.version
            if on_change is not None:
                on_change(job)
        if job is not None and job.status.is_terminal and not _execution_running(runtime, job):
            return job
        time.sleep(poll)
    raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f} s")


def _execution_running(runtime: LocalRuntime, job: Job) -> bool:
    if job.execution_arn is None:  # rejected before a workflow started
        return False
    answer = runtime.client("stepfunctions").describe_execution(executionArn=job.execution_arn)
    return bool(answer["status"] == "RUNNING")


def example_steps(manifest_text: bytes | str) -> int:
    """Number of steps the example's training runs: its command's ``--steps`` or ``--max-steps``, else 300.

    Parameters
    ----------
    manifest_text
        The manifest (YAML or JSON).

    Returns
    -------
    int
        Total training steps.
    """
    command = parse_manifest_text(manifest_text).training.command
    for index, arg in enumerate(command):
        for flag in _STEP_FLAGS:
            if arg == flag and index + 1 < len(command):
                return int(command[index + 1])
            if arg.startswith(f"{flag}="):
                return int(arg.removeprefix(f"{flag}="))
    return EXAMPLE_DEFAULT_STEPS


# The examples' flags for their length: tiny-regression's --steps, the framework examples' --max-steps.
_STEP_FLAGS = ("--steps", "--max-steps")


def job_progress(runtime: LocalRuntime, job_id: str) -> ProgressSource:
    """A progress source for :class:`spotrun.local.chaos.injector.Injector`: the job's training attempt and its step.

    The step is the one in the attempt's progress object, or, when that is missing or behind, the latest
    committed checkpoint the attempt wrote itself (one newer than the checkpoint it restored).

    Parameters
    ----------
    runtime
        The runtime the job runs in.
    job_id
        The job.

    Returns
    -------
    ProgressSource
        Returns None while the job is not training (or its current attempt has ended).
    """
    store = job_store(runtime.settings.jobs_table, runtime.settings.region)
    s3 = runtime.client("s3")
    bucket = runtime.settings.jobs_bucket

    def reported_step(attempt: int) -> int | None:
        try:
            body = s3.get_object(Bucket=bucket, Key=progress_key(job_id, attempt))["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        step = json.loads(body).get("step")
        return int(step) if isinstance(step, int | float) else None

    def read() -> Progress | None:
        job = store.get(job_id)
        attempt = job.current_attempt if job is not None else None
        if job is None or attempt is None or job.status is not JobStatus.TRAINING or attempt.ended_at:
            return None
        committed = latest_committed(s3, bucket, job_id)
        own = committed.step if committed and committed.step > (attempt.restored_step or 0) else None
        steps = [step for step in (reported_step(attempt.number), own) if step is not None]
        return Progress(attempt.number, attempt.instance_id, max(steps) if steps else None)

    return read
