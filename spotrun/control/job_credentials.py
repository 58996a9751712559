"""S3 credentials for an instance's own job, and for no other: the answer of ``POST /agent/credentials``.

The instance role reaches nothing of the jobs bucket. The agent asks the API, signed with its instance's role
session, for credentials for the job and attempt it runs; the caller is identified as for its reports
(:func:`spotrun.control.agent_reports.caller_open_attempt`: the instance of the job's open attempt, and no
other), and the API function assumes the job-access role with the session policy of that job and attempt
(:func:`spotrun.model.agent_protocol.session_policy.job_session_policy`). The session's permissions are the
intersection of the role's policy and that session policy, so training code holding them reaches only its own job.
"""

from __future__ import annotations

import logging

from pydantic import Field

from spotrun.control.agent_reports import CallerIdentity, ReportNotWaited, caller_open_attempt
from spotrun.control.ports import JobAccess, JobStore, LogEvents
from spotrun.model.agent_protocol.session_policy import JobCredentials, job_session_policy, serialize
from spotrun.model.base import DeferredModel
from spotrun.model.layout import JOB_ID_PATTERN, log_group, log_stream
from spotrun.model.manifest.rules import JsonInt

logger = logging.getLogger(__name__)


class CredentialsRequest(DeferredModel):
    """What the agent asks credentials for; the body of ``POST /agent/credentials``."""

    job_id: str = Field(pattern=rf"^{JOB_ID_PATTERN}$", description="The job the agent runs a step of.")
    # Not true for attempt 1, nor "2" for 2: a request the schema refuses is refused.
    attempt: JsonInt = Field(ge=1, le=10_000, description="The attempt the agent runs.")


def issue_job_credentials(
    request: CredentialsRequest,
    *,
    identity: CallerIdentity,
    instance_role_name: str,
    jobs_bucket: str,
    partition: str,
    store: JobStore,
    access: JobAccess,
    logs: LogEvents,
) -> JobCredentials:
    """Credentials that reach ``request.job_id``'s objects, for the instance of its open attempt only.

    Parameters
    ----------
    request
        The job and attempt.
    identity
        Who signed the request (API Gateway's, never the body's).
    instance_role_name
        The deployment's instance role: only its sessions are heard.
    jobs_bucket, partition
        Where the job's objects are, and the partition of their ARNs.
    store, access
        The job store, and STS for the job-access role.
    logs
        CloudWatch Logs: the attempt's log stream is created here, since the job's credentials may write to it
        but not create it (IAM judges ``logs:CreateLogStream`` on the log group, which would let a job create
        any stream of it).

    Returns
    -------
    JobCredentials
        A session named after the job, with the job's session policy.

    Raises
    ------
    ReportRefused
        The caller is not the instance of the job's open attempt.
    ReportNotWaited
        The job's open attempt is another one (the instance runs a step of an attempt that has ended).
    spotrun.model.agent_protocol.session_policy.JobAccessRefused
        The job's manifest cannot be expressed as its own access (an input over ``jobs/``, or too many).
    """
    job, attempt = caller_open_attempt(identity, instance_role_name, store, request.job_id)
    if attempt.number != request.attempt:
        raise ReportNotWaited(
            f"job {request.job_id} runs attempt {attempt.number}, not attempt {request.attempt}"
        )
    policy = job_session_policy(
        job.job_id, attempt.number, job.require_manifest(), jobs_bucket=jobs_bucket, partition=partition
    )
    _open_stream(logs, jobs_bucket, job.job_id, attempt.number)
    # The session's name is the job's (at most 61 characters, within STS's 64): CloudTrail shows whose it was.
    return access.credentials(job.job_id, serialize(policy))


def _open_stream(logs: LogEvents, jobs_bucket: str, job_id: str, attempt: int) -> None:
    try:
        logs.create_stream(log_group(jobs_bucket), log_stream(job_id, attempt))
    except Exception as exc:  # the live log only helps a human: the credentials still go out
        logger.warning("could not create the log stream of job %s attempt %d: %s", job_id, attempt, exc)
