"""Runs one agent step end to end: heartbeats around it, then exactly one report to the workflow."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spotrun.agent.credentials import CredentialsError, JobCredentialsSource, job_session
from spotrun.agent.imds import DEFAULT_ENDPOINT, ImdsClient
from spotrun.agent.periodic import Ticker
from spotrun.agent.reporter import ApiReporter, ReportError, TaskAbandonedError, WorkflowReporter
from spotrun.agent.secrets import SecretReader
from spotrun.agent.step_context import StepContext, StepReport
from spotrun.agent.steps.stage import run_stage
from spotrun.agent.steps.train import run_train
from spotrun.agent.supervision.gpu import CachedInstanceId, CloudWatchMetrics, count_gpus
from spotrun.agent.supervision.notice_relay import deliver_notice
from spotrun.agent.supervision.spot_notices import ImdsNotices, NoticeWatcher
from spotrun.agent.transfer.download import DEFAULT_WORKERS, DirectGetter
from spotrun.model import layout
from spotrun.model.agent_protocol.command import STAGING_FAILED, TRAINING_FAILED, AgentCommand, FailureCause
from spotrun.model.manifest.schema import split_s3_uri

logger = logging.getLogger(__name__)

EXIT_REPORTED = 0
EXIT_REPORT_FAILED = 1
EXIT_BAD_COMMAND = 2
EXIT_ABANDONED = 3

STEPS: dict[str, Callable[[AgentCommand, StepContext], StepReport]] = {"stage": run_stage, "train": run_train}
STEP_ERRORS = {"stage": STAGING_FAILED, "train": TRAINING_FAILED}


@dataclass(frozen=True)
class AgentSettings:
    """The agent's own configuration, from its environment.

    Attributes
    ----------
    nvme_root
        ``SPOTRUN_NVME_ROOT``, default ``/mnt/nvme``.
    imds_endpoint
        ``SPOTRUN_IMDS_ENDPOINT``, default ``http://169.254.169.254``.
    workers
        ``SPOTRUN_AGENT_WORKERS``: files copied at once, default 32 (``staging.DEFAULT_WORKERS``), and ranged
        GETs in flight at once, at most 4 per CPU (``ranges.ranged_streams``).
    credentials_url
        ``SPOTRUN_AGENT_CREDENTIALS_URL``: the API's credentials route, where the agent gets its job's S3
        credentials (the user data writes it; the command document itself can only be read with them).
    """

    nvme_root: Path = Path("/mnt/nvme")
    imds_endpoint: str = DEFAULT_ENDPOINT
    workers: int = DEFAULT_WORKERS
    credentials_url: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AgentSettings:
        """Read the settings from ``environ`` (``os.environ`` when omitted)."""
        env = os.environ if environ is None else environ
        return cls(
            nvme_root=Path(env.get("SPOTRUN_NVME_ROOT") or "/mnt/nvme"),
            imds_endpoint=env.get("SPOTRUN_IMDS_ENDPOINT") or DEFAULT_ENDPOINT,
            workers=int(env.get("SPOTRUN_AGENT_WORKERS") or DEFAULT_WORKERS),
            credentials_url=env.get("SPOTRUN_AGENT_CREDENTIALS_URL") or "",
        )


def execute(command: AgentCommand, ctx: StepContext) -> int:
    """Run ``command`` with heartbeats every ``command.heartbeat_seconds``, then report its result once.

    Parameters
    ----------
    command
        The step to run.
    ctx
        Its ports.

    Returns
    -------
    int
        :data:`EXIT_REPORTED`, :data:`EXIT_REPORT_FAILED` or :data:`EXIT_ABANDONED`.
    """

    def beat() -> bool:
        try:
            ctx.reporter.heartbeat(ctx.checkpoint_interval, ctx.gpu)
        except TaskAbandonedError as exc:
            logger.warning("the workflow no longer waits for this task (%s)", exc)
            ctx.abandoned.set()
            return False
        except ReportError as exc:
            logger.warning("heartbeat not delivered: %s", exc)
        return True

    if command.step not in STEPS:
        logger.error("step %s is not one answered to the workflow", command.step)
        return EXIT_BAD_COMMAND
    logger.info("step %s of job %s, attempt %d", command.step, command.job_id, command.attempt)
    with Ticker(command.heartbeat_seconds, beat, "heartbeat"):
        try:
            report = STEPS[command.step](command, ctx)
        except Exception as exc:
            logger.exception("step %s failed", command.step)
            report = StepReport.failed(
                STEP_ERRORS[command.step],
                FailureCause(message=ctx.masker.mask(f"{type(exc).__name__}: {exc}")),
            )
    return send_report(report, ctx.reporter)


def forward_notice(command: AgentCommand, nvme_root: Path) -> int:
    """Run a ``notice`` command: hand the spot notice to the train step of its job and attempt, if it runs here.

    Nothing is reported to the workflow: the train step reports ``Spot.Interrupted`` itself. A notice for a
    job whose train step does not run on this instance (ended, or never started) changes nothing.

    Parameters
    ----------
    command
        A ``notice`` command.
    nvme_root
        The instance-store root where the train step keeps its pid file.

    Returns
    -------
    int
        :data:`EXIT_REPORTED` (delivered, or nothing to deliver to); :data:`EXIT_REPORT_FAILED` when the train
        step's process could not be signalled.
    """
    pid_file = layout.NvmeLayout(nvme_root, command.job_id).supervisor_pid_file(command.attempt)
    try:
        outcome, pid = deliver_notice(pid_file)
    except OSError as exc:
        logger.error("could not deliver the spot notice to the train step: %s", exc)
        return EXIT_REPORT_FAILED
    if outcome == "delivered":
        logger.warning(
            "spot notice for job %s attempt %d delivered to its train step (agent pid %s)",
            command.job_id,
            command.attempt,
            pid,
        )
    else:
        logger.info(
            "spot notice for job %s attempt %d: no train step of it runs on this instance; nothing to do",
            command.job_id,
            command.attempt,
        )
    return EXIT_REPORTED


def send_report(report: StepReport, reporter: WorkflowReporter) -> int:
    """Send a step's report; returns the agent's exit status."""
    if report.abandoned:
        logger.warning("nothing reported: the task was abandoned")
        return EXIT_ABANDONED
    try:
        if report.output is not None:
            reporter.succeed(report.output)
            logger.info("reported success")
        else:
            assert report.error is not None
            assert report.cause is not None
            reporter.fail(report.error, report.cause)
            logger.info("reported %s: %s", report.error, report.cause.message)
    except TaskAbandonedError as exc:
        logger.warning("report refused, the workflow no longer waits for this task: %s", exc)
        return EXIT_ABANDONED
    except ReportError as exc:
        logger.error("could not report to the workflow: %s", exc)
        return EXIT_REPORT_FAILED
    return EXIT_REPORTED


# What a session and client read from the environment when they are made: a test (or a new emulator) that
# changes one of these gets new ones.
_CLIENT_ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)
_clients_lock = threading.Lock()
# Typed Any on purpose: with boto3-stubs installed, client() only accepts literal service names.
_machine_sessions: dict[tuple[str, tuple[str | None, ...]], Any] = {}
_clients: weakref.WeakKeyDictionary[Any, dict[tuple[str, str, tuple[str | None, ...]], Any]] = (
    weakref.WeakKeyDictionary()
)


def _made_once(kind: str, region: str, session: Any, make: Callable[[Any], Any]) -> Any:
    """What ``make(session)`` returns, made once per session, ``kind``, region and client environment."""
    import boto3

    where = tuple(os.environ.get(name) for name in _CLIENT_ENVIRONMENT)
    with _clients_lock:
        if session is None:
            if (region, where) not in _machine_sessions:
                _machine_sessions[region, where] = boto3.session.Session(region_name=region)
            session = _machine_sessions[region, where]
        # Keyed weakly by the session: a session dropped (a finished step's job credentials) takes its clients.
        made = _clients.setdefault(session, {})
        if (kind, region, where) not in made:
            made[kind, region, where] = make(session)
        return made[kind, region, where]


def aws_client(service: str, region: str, session: Any = None) -> Any:
    """A boto3 client with a connection pool sized for parallel transfers and patient retries, made once.

    Made on first use (never at import) from ``session``, or from this process's one session of the machine's
    credentials, and then kept for that session, service and region: a client is thread-safe and costs tens of
    ms to make (its service model, the session's event hooks copied), a session is not thread-safe, so clients
    are only made under a lock. ``AWS_ENDPOINT_URL`` in the environment (the emulator) is honoured by boto3
    itself.
    """
    from spotrun.agent.transfer.client_config import transfer_config

    return _made_once(
        service,
        region,
        session,
        lambda made_from: made_from.client(service, config=transfer_config(), region_name=region),
    )


def direct_getter(region: str, session: Any = None) -> DirectGetter | None:
    """The CRT's getter beside ``aws_client("s3", region, session)``: its endpoint, its credentials; made once.

    None when the CRT cannot be used (:func:`spotrun.agent.transfer.crt_gets.crt_getter`): staging then makes every
    GET through the boto3 client.
    """
    from spotrun.agent.transfer.crt_gets import crt_getter

    s3 = aws_client("s3", region, session)
    return _made_once(
        "s3-crt", region, session, lambda made_from: crt_getter(s3, made_from.get_credentials(), region)
    )


def job_s3_session(command_uri: str, settings: AgentSettings, region: str) -> Any:
    """The boto3 session of the job's S3 credentials, for the job and attempt the command URI names.

    The instance role reaches nothing of the jobs bucket: the command document itself is read with these.
    The route answers only the instance of that job's open attempt (:mod:`spotrun.agent.credentials`). Without
    a credentials route (off EC2: a developer's machine, the agent's own tests) it is None, and S3 is signed
    with the machine's credentials; this is no way around the isolation, which IAM enforces: on an instance,
    those are the instance role's, which reach no job's objects.

    Raises
    ------
    CommandRefusedError
        When the URI is not a command document's, or the credentials route is not the API's.
    """
    import boto3

    if not settings.credentials_url:
        return None
    try:
        _, key = split_s3_uri(command_uri)
        job_id, attempt, _ = layout.parse_agent_command_key(key)
        instance = boto3.session.Session(region_name=region)

        def signing() -> Any:
            found = instance.get_credentials()
            if found is None:
                raise CredentialsError("no instance credentials to sign the credentials request with")
            return found.get_frozen_credentials()

        source = JobCredentialsSource(
            settings.credentials_url, region, signing, job_id=job_id, attempt=attempt
        )
    except (ValueError, CredentialsError) as exc:
        raise CommandRefusedError(str(exc)) from None
    return job_session(source, region)


class CommandRefusedError(ValueError):
    """The command document does not validate: the agent runs nothing of it."""


def load_command(s3: Any, command_uri: str) -> AgentCommand:
    """Read and validate the :class:`AgentCommand` document at ``s3://bucket/key``.

    Raises
    ------
    CommandRefusedError
        When the document is not a valid command (its message names every field at fault), or not the one
        of the job, attempt and step its key names (the job's credentials are that job's).
    """
    bucket, key = split_s3_uri(command_uri)
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    try:
        command = AgentCommand.model_validate_json(body)
    except ValidationError as exc:
        raise CommandRefusedError(describe_refusal(exc)) from None
    node = command.group.node if command.group else 0
    if layout.agent_command_key(command.job_id, command.attempt, command.step, node) != key:
        raise CommandRefusedError("job_id, attempt, step: not the ones of the document's key")
    return command


def describe_refusal(error: ValidationError) -> str:
    """Each problem of a refused command as ``field: message``, without the values.

    pydantic's own text quotes each value given, and a malformed document may carry its task token in any
    field: only where and why go to the log.
    """
    problems = [
        f"{'.'.join(str(part) for part in item['loc']) or 'document'}: {item['msg']}"
        for item in error.errors()
    ]
    return f"{len(problems)} problem(s): " + "; ".join(problems)


def bootstrap_region(environ: Mapping[str, str], imds: ImdsClient) -> str:
    """Region used to read the command document: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, IMDS, us-east-1."""
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    try:
        return imds.region()
    except Exception:  # off EC2 without a region set: S3 redirects a wrong guess anyway
        return "us-east-1"


def api_reporter(command: AgentCommand) -> ApiReporter:
    """The reporter on the command's agent route, signing with this machine's credentials.

    On EC2 those are the instance role's, which botocore reads from IMDS (and refreshes before they expire); the
    route answers only the instance that runs the job's open attempt.
    """
    import boto3

    session = boto3.session.Session(region_name=command.region)

    def credentials() -> Any:
        found = session.get_credentials()
        if found is None:
            raise ReportError("no AWS credentials to sign the report with")
        return found.get_frozen_credentials()

    return ApiReporter(
        command.report_url,
        command.region,
        credentials,
        job_id=command.job_id,
        attempt=command.attempt,
        step=command.step,
    )


def build_context(
    command: AgentCommand, settings: AgentSettings, environ: Mapping[str, str], s3_session: Any = None
) -> StepContext:
    """The production ports for ``command``: boto3 clients in its region, and the IMDS notice source.

    S3, the live log and the reads of ``training.secrets`` go through ``s3_session`` (the job's credentials,
    :func:`job_s3_session`); CloudWatch metrics and the reports are signed with the instance role's.
    """
    imds = ImdsClient(settings.imds_endpoint)
    notices = ImdsNotices(imds)
    return StepContext(
        s3=aws_client("s3", command.region, s3_session),
        direct=direct_getter(command.region, s3_session),
        # The job's credentials write only this attempt's stream (spotrun.model.agent_protocol.session_policy).
        logs=aws_client("logs", command.region, s3_session),
        reporter=api_reporter(command),
        nvme_root=settings.nvme_root,
        base_env=dict(environ),
        watcher=NoticeWatcher(notices, command.poll_seconds),
        workers=settings.workers,
        metrics=CloudWatchMetrics(aws_client("cloudwatch", command.region)),
        instance_id=CachedInstanceId(imds),
        gpus_per_node=lambda: count_gpus(imds),
        local_ipv4=imds.local_ipv4,
        instance_type=imds.instance_type,
        secret_reader=SecretReader(lambda service, region: aws_client(service, region, s3_session)),
    )
