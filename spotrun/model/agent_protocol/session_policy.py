"""What one job's instance may do in S3 and CloudWatch Logs: the session policy of the credentials it gets for its job.

The agent's S3 credentials are a session of the deployment's job-access role that the API function assumes for
one job and one attempt, with the policy built here as an inline session policy. AWS grants such a session the
intersection of the role's own policy (the ceiling: the jobs bucket and the data buckets) and the session
policy ("The resulting session's permissions are the intersection of the role's identity-based policy and the
session policies", https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session).
So whatever the training code on the instance does with those credentials, it reaches only:

- reads: everything under its own ``jobs/<job-id>/`` (its command documents, checkpoints, outputs, logs), the
  inputs and the code its manifest names, and the checkpoints of the job it resumes from
  (``training.resume_from``);
- writes: its checkpoints (which it also prunes: the only deletes), its outputs, and this attempt's log,
  progress, output list and telemetry parts (every node's, under the attempt's telemetry prefix). Never its
  command documents, which the control plane writes;
- listings: the same prefixes, as ``s3:prefix`` conditions on ``s3:ListBucket``;
- secrets: exactly the references of its ``training.secrets`` (:func:`secret_statements`), within the
  deployment's allowed ones (:func:`secret_ceiling_statements`, the CDK option ``secret_references``).
- CloudWatch Logs: this attempt's log stream only (:func:`spotrun.model.layout.log_stream`), written (the live
  log, :mod:`spotrun.agent.supervision.log_shipper`); the control plane creates it.

Keys come from the manifest, and ``*``, ``?`` and ``$`` would be wildcards or variables in a policy: they are
written as IAM's literal forms ``${*}``, ``${?}`` and ``${$}``
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html#policy-vars-specialchars).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final, NamedTuple

from pydantic import ConfigDict, Field

from spotrun.model import layout
from spotrun.model.base import DeferredModel
from spotrun.model.manifest.rules import split_s3_uri
from spotrun.model.manifest.schema import JobManifest
from spotrun.model.manifest.secrets import parse_reference

POLICY_VERSION: Final = "2012-10-17"
# STS refuses an inline session policy longer than this ("The plaintext that you use for both inline and managed
# session policies can't exceed 2,048 characters", AssumeRole's Policy parameter,
# https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRole.html).
MAX_SESSION_POLICY_CHARS: Final = 2048

READ: Final = ("s3:GetObject",)
WRITE: Final = ("s3:PutObject", "s3:AbortMultipartUpload")
PRUNE: Final = ("s3:DeleteObject",)
LIST: Final = ("s3:ListBucket",)
SECRETSMANAGER_READ: Final = "secretsmanager:GetSecretValue"
PARAMETER_READ: Final = "ssm:GetParameter"
DECRYPT: Final = "kms:Decrypt"
METRICS_PUT: Final = "cloudwatch:PutMetricData"

# The live log: the agent writes its attempt's stream, and nothing else of CloudWatch Logs. The control plane
# creates the stream (spotrun.control.job_credentials): IAM judges logs:CreateLogStream on the log group, not the
# stream ("CreateLogStream: log-group*", PutLogEvents: "log-stream*" in
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatchlogs.html), so a job
# allowed to create its stream could create any stream of the group.
LOG: Final = ("logs:PutLogEvents",)

_LITERALS: Final = {"$": "${$}", "*": "${*}", "?": "${?}"}
# A role session assumed by a role session (the API function's) lasts at most one hour ("role chaining",
# https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_terms-and-concepts.html#iam-term-role-chaining):
# the agent asks again before they expire.
SESSION_SECONDS: Final = 3600


class JobCredentials(DeferredModel):
    """Temporary credentials for one attempt of one job: the answer of ``POST /agent/credentials``.

    Secret: never logged, never stored (the agent keeps them in memory, botocore refreshes them).
    """

    model_config = ConfigDict(frozen=True)

    access_key_id: str = Field(min_length=16, max_length=128)
    secret_access_key: str = Field(min_length=1, repr=False)
    session_token: str = Field(min_length=1, repr=False)
    expiration: datetime = Field(description="When they expire (UTC); ask again before.")


class JobAccessRefused(ValueError):
    """No session policy can be issued for the job: it would reach other jobs, or not fit STS's limit."""


def literal(text: str) -> str:
    """``text`` as a policy matches it literally: ``*``, ``?`` and ``$`` in their ``${...}`` forms."""
    return "".join(_LITERALS.get(char, char) for char in text)


def bucket_arn(partition: str, bucket: str) -> str:
    """The ARN of a bucket (``s3:ListBucket``'s resource)."""
    return f"arn:{partition}:s3:::{bucket}"


def log_stream_arn(partition: str, job_id: str, attempt: int) -> str:
    """The ARN of one attempt's log stream in any group, region and account: the role's ceiling pins all three
    to the deployment's group (:func:`ceiling_statements`), and the session policy stays short."""
    return f"arn:{partition}:logs:*:*:log-group:*:log-stream:{layout.log_stream(job_id, attempt)}"


class _Access:
    """Resources and listing prefixes gathered per bucket, in the order first named, without duplicates."""

    def __init__(self, partition: str):
        self.partition = partition
        self.reads: dict[str, None] = {}
        self.lists: dict[str, dict[str, None]] = {}

    def read_prefix(self, bucket: str, prefix: str) -> None:
        self.reads[f"{bucket_arn(self.partition, bucket)}/{literal(prefix)}*"] = None
        self.lists.setdefault(bucket, {})[f"{literal(prefix)}*"] = None

    def read_object(self, bucket: str, key: str) -> None:
        self.reads[f"{bucket_arn(self.partition, bucket)}/{literal(key)}"] = None


class StagedSource(NamedTuple):
    """One S3 source the agent stages for a job: a data input or the code, as an object or a prefix."""

    field: str  # the manifest field that names it, e.g. ``data.inputs[0].source``
    uri: str
    bucket: str
    key: str
    is_prefix: bool


def staged_sources(manifest: JobManifest) -> list[StagedSource]:
    """The data inputs and the code a job's instance reads, each as the object or the prefix it is staged as.

    One home for the rule, shared by the session policy (what the instance may read) and admission (what
    must exist, :mod:`spotrun.control.staged_sources`): a key ending in ``/`` (or empty) is a prefix; the code
    is one object when it is a ``.tar.gz`` archive and a prefix otherwise (``spotrun.agent.steps.stage``).
    """
    named = [
        (f"data.inputs[{index}].source", item.source, False)
        for index, item in enumerate(manifest.data.inputs)
    ]
    code = manifest.training.code
    if code is not None:
        named.append(("training.code", code, not layout.is_code_archive_key(split_s3_uri(code)[1])))
    sources = []
    for field, uri, as_prefix in named:
        bucket, key = split_s3_uri(uri)
        if as_prefix and key and not key.endswith("/"):
            key += "/"  # code that is not an archive is staged as a prefix (spotrun.agent.steps.stage)
        sources.append(StagedSource(field, uri, bucket, key, key == "" or key.endswith("/")))
    return sources


def overlaps_jobs(source: StagedSource, jobs_bucket: str) -> bool:
    """Whether ``source`` lies under (or above) the jobs bucket's ``jobs/``: no job may read it."""
    key = source.key
    return source.bucket == jobs_bucket and (
        key.startswith(layout.JOBS_PREFIX) or (source.is_prefix and layout.JOBS_PREFIX.startswith(key))
    )


def _source(access: _Access, source: StagedSource, jobs_bucket: str) -> None:
    if overlaps_jobs(source, jobs_bucket):
        # Under (or above) jobs/, an input would open other jobs' command documents, checkpoints and outputs.
        raise JobAccessRefused(
            f"{source.uri} overlaps the jobs bucket's {layout.JOBS_PREFIX}, where every job keeps its own objects"
        )
    if source.is_prefix:
        access.read_prefix(source.bucket, source.key)
    else:
        access.read_object(source.bucket, source.key)


def job_session_policy(
    job_id: str, attempt: int, manifest: JobManifest, *, jobs_bucket: str, partition: str = "aws"
) -> dict[str, Any]:
    """The session policy of one attempt's S3 credentials: its own job's objects, and nothing of another job.

    Parameters
    ----------
    job_id
        The job (checked: :func:`spotrun.model.layout.check_job_id`).
    attempt
        The attempt the credentials are for: its log, progress and output list are the per-attempt writes.
    manifest
        The job's manifest (``Job.require_manifest()``): its inputs, code and ``resume_from``.
    jobs_bucket
        The deployment's jobs bucket.
    partition
        The AWS partition of the ARNs (``aws``, ``aws-cn``, ``aws-us-gov``).

    Returns
    -------
    dict
        An IAM policy document: one read statement, one write, one prune, one listing statement per bucket,
        and one of its log stream.

    Raises
    ------
    JobAccessRefused
        When an input or the code lies under the jobs bucket's ``jobs/`` (another job's objects), or the
        document is longer than :data:`MAX_SESSION_POLICY_CHARS` once serialized (:func:`serialize`).
    """
    own = layout.job_prefix(layout.check_job_id(job_id))
    access = _Access(partition)
    access.read_prefix(jobs_bucket, own)
    for source in staged_sources(manifest):
        _source(access, source, jobs_bucket)
    if manifest.training.resume_from is not None:
        access.read_prefix(jobs_bucket, layout.checkpoints_prefix(manifest.training.resume_from))
    objects = bucket_arn(partition, jobs_bucket)
    checkpoints = f"{objects}/{layout.checkpoints_prefix(job_id)}*"
    writes = [
        checkpoints,
        f"{objects}/{layout.output_prefix(job_id)}*",
        f"{objects}/{layout.log_key(job_id, attempt)}",
        f"{objects}/{layout.progress_key(job_id, attempt)}",
        f"{objects}/{layout.output_list_key(job_id, attempt)}",
        f"{objects}/{layout.telemetry_prefix(job_id)}attempt-{attempt:03d}/*",
    ]
    statements: list[dict[str, Any]] = [
        {"Sid": "Read", "Effect": "Allow", "Action": list(READ), "Resource": list(access.reads)},
        {"Sid": "Write", "Effect": "Allow", "Action": list(WRITE), "Resource": writes},
        {"Sid": "Prune", "Effect": "Allow", "Action": list(PRUNE), "Resource": [checkpoints]},
    ]
    for index, (bucket, prefixes) in enumerate(access.lists.items()):
        statements.append(
            {
                "Sid": f"List{index}",
                "Effect": "Allow",
                "Action": list(LIST),
                "Resource": bucket_arn(partition, bucket),
                "Condition": {"StringLike": {"s3:prefix": list(prefixes)}},
            }
        )
    statements += secret_statements(manifest)
    log = log_stream_arn(partition, job_id, attempt)
    statements.append({"Sid": "Log", "Effect": "Allow", "Action": list(LOG), "Resource": log})
    policy = {"Version": POLICY_VERSION, "Statement": statements}
    size = len(serialize(policy))
    if size > MAX_SESSION_POLICY_CHARS:
        raise JobAccessRefused(
            f"job {job_id}'s S3 access takes {size} characters as a session policy, over STS's "
            f"{MAX_SESSION_POLICY_CHARS}: name fewer inputs (a common prefix instead of many objects)"
        )
    return policy


def secret_statements(manifest: JobManifest) -> list[dict[str, Any]]:
    """The session policy's reads of ``training.secrets``: exactly the job's references, and the key's use.

    ``kms:Decrypt`` is allowed only as Secrets Manager or Parameter Store calls it on the job's behalf
    (``kms:ViaService``, https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html#conditions-kms-via-service):
    a SecureString or a secret is decrypted with the caller's permission on its key, and the service call itself
    is limited to the job's references by the statements before it. Empty without secrets.
    """
    references = [parse_reference(text) for text in manifest.training.secrets.values()]
    statements: list[dict[str, Any]] = []
    for sid, service, action in (
        ("Secrets", "secretsmanager", SECRETSMANAGER_READ),
        ("Parameters", "ssm", PARAMETER_READ),
    ):
        arns = list(dict.fromkeys(literal(r.arn) for r in references if r.service == service))
        if arns:
            statements.append({"Sid": sid, "Effect": "Allow", "Action": action, "Resource": arns})
    if references:
        services = sorted({f"{r.service}.{r.region}.amazonaws.com" for r in references})
        statements.append(
            {
                "Sid": "Decrypt",
                "Effect": "Allow",
                "Action": DECRYPT,
                "Resource": "*",
                "Condition": {"StringEquals": {"kms:ViaService": services}},
            }
        )
    return statements


def secret_ceiling_statements(patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    """The job-access role's reads of secrets: the deployment's ``secret_references`` patterns, nothing else.

    Parameters
    ----------
    patterns
        ARN patterns of Secrets Manager secrets and SSM parameters
        (:func:`spotrun.model.manifest.secrets.check_pattern`).
    """
    secrets = [p for p in patterns if p.split(":")[2] == "secretsmanager"]
    parameters = [p for p in patterns if p.split(":")[2] == "ssm"]
    statements: list[dict[str, Any]] = []
    if secrets:
        statements.append({"Effect": "Allow", "Action": SECRETSMANAGER_READ, "Resource": secrets})
    if parameters:
        statements.append({"Effect": "Allow", "Action": PARAMETER_READ, "Resource": parameters})
    if patterns:
        services = ["secretsmanager.*.amazonaws.com", "ssm.*.amazonaws.com"]
        statements.append(
            {
                "Effect": "Allow",
                "Action": DECRYPT,
                "Resource": "*",
                "Condition": {"StringLike": {"kms:ViaService": services}},
            }
        )
    return statements


def instance_secret_denials(patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    """What the instance role must be refused of the deployment's secret references.

    The instance role carries AWS's ``AmazonSSMManagedInstanceCore`` (the SSM Agent needs it), which allows
    ``ssm:GetParameter`` and ``ssm:GetParameters`` on every parameter; any process of an instance can use that
    role's credentials (IMDS). An explicit Deny wins over it
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html), so a job reads
    the allowed parameters only through its own session, which names its own references. Secrets Manager needs
    no denial: the instance role has no statement of it.
    """
    parameters = [p for p in patterns if p.split(":")[2] == "ssm"]
    if not parameters:
        return []
    return [{"Effect": "Deny", "Action": [PARAMETER_READ, "ssm:GetParameters"], "Resource": parameters}]


def instance_metrics_statements(namespace: str) -> list[dict[str, Any]]:
    """The instance role's metrics: ``cloudwatch:PutMetricData`` in ``namespace`` only (the agent's GPU metrics).

    PutMetricData has no resource-level permissions (``*``); the ``cloudwatch:namespace`` condition keeps it to
    spotrun's namespace
    (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html).
    """
    return [
        {
            "Effect": "Allow",
            "Action": METRICS_PUT,
            "Resource": "*",
            "Condition": {"StringEquals": {"cloudwatch:namespace": namespace}},
        }
    ]


def ceiling_statements(
    jobs_bucket_arn: str, data_bucket_arns: tuple[str, ...] = (), *, log_group_arn: str
) -> list[dict[str, Any]]:
    """The job-access role's own policy: the union of what any job's session policy may name.

    No session holds it as it is; each is narrowed to one job by :func:`job_session_policy`, and AWS grants the
    intersection. The CDK app and the emulator both build the role from this.

    Parameters
    ----------
    jobs_bucket_arn
        The jobs bucket's ARN (a CDK token in the app).
    data_bucket_arns
        The deployer's buckets of inputs and code: read only.
    log_group_arn
        The deployment's log group of training logs (``arn:...:log-group:<name>``, without ``:*``): its
        streams may be written.
    """
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": list(LOG), "Resource": f"{log_group_arn}:log-stream:*"},
        # Writes under jobs/ only; deletes of checkpoints only (the agent prunes old ones).
        {"Effect": "Allow", "Action": list(WRITE), "Resource": f"{jobs_bucket_arn}/{layout.JOBS_PREFIX}*"},
        {
            "Effect": "Allow",
            "Action": list(PRUNE),
            "Resource": f"{jobs_bucket_arn}/{layout.JOBS_PREFIX}*/checkpoints/*",
        },
        # Inputs and code may sit anywhere in the jobs bucket (the example's are under examples/).
        {"Effect": "Allow", "Action": list(READ), "Resource": f"{jobs_bucket_arn}/*"},
        {"Effect": "Allow", "Action": list(LIST), "Resource": jobs_bucket_arn},
    ]
    for data_bucket in data_bucket_arns:
        statements.append({"Effect": "Allow", "Action": list(READ), "Resource": f"{data_bucket}/*"})
        statements.append({"Effect": "Allow", "Action": list(LIST), "Resource": data_bucket})
    return statements


def serialize(policy: dict[str, Any]) -> str:
    """The policy as STS receives it: compact JSON, ASCII only (other characters as ``\\u`` escapes)."""
    return json.dumps(policy, separators=(",", ":"), ensure_ascii=True)
