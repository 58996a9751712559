"""Which keys of which bucket each Lambda function reads, writes or lists, and the statement each entry becomes.

:func:`infra.constructs.iam.permissions.grants_for` reads this table for every bucket setting a function declares;
a bucket setting without an entry here stops the synth, so every new function declares its S3 access on purpose.
"""

from __future__ import annotations

from infra.constructs.iam.grant_types import Grant
from spotrun.model.layout import CODE_PREFIX, JOBS_PREFIX, MANIFEST_PREFIX, SCHEDULES_PREFIX

READ = ("s3:GetObject",)
LIST = ("s3:ListBucket",)  # granted on the bucket, with the pattern as an s3:prefix condition
WRITE = ("s3:PutObject", "s3:AbortMultipartUpload")
COPY_READ = ("s3:GetObject", "s3:GetObjectTagging")
COPY_WRITE = ("s3:PutObject", "s3:PutObjectTagging", "s3:AbortMultipartUpload")

# (function, bucket) -> [(actions, key pattern)]
BUCKET_ACCESS: dict[tuple[str, str], list[tuple[tuple[str, ...], str]]] = {
    # Reads the dropped manifest; writes `<key>.rejected.json` beside a manifest that fails validation.
    # Lists the keys a manifest's inputs and code name (do they exist?), anywhere in the bucket.
    ("submit", "jobs"): [(READ + WRITE, f"{MANIFEST_PREFIX}*"), (LIST, "*")],
    # Writes the agent's command document under the job's prefix.
    ("agent_step", "jobs"): [(WRITE, f"{JOBS_PREFIX}*")],
    # Copies the trained model out of the job's outputs into the archive (any prefix a manifest chooses).
    ("archive", "jobs"): [(COPY_READ, f"{JOBS_PREFIX}*")],
    ("archive", "archive"): [(COPY_WRITE, "*")],
    # Reads the attempt's last reported progress and lists its committed checkpoints (the work lost).
    ("interrupted", "jobs"): [(READ, f"{JOBS_PREFIX}*"), (LIST, f"{JOBS_PREFIX}*")],
    # Writes the agent's "notice" command under the job's prefix.
    ("ec2_events", "jobs"): [(WRITE, f"{JOBS_PREFIX}*")],
    # Reads the tail of the jobs' training logs, and writes the manifests of the schedules it creates.
    # POST /code: signs the presigned PUT of one archive (s3:PutObject) under code/.
    ("api", "jobs"): [
        (READ, f"{JOBS_PREFIX}*"),
        (WRITE, f"{SCHEDULES_PREFIX}*"),
        (("s3:PutObject",), f"{CODE_PREFIX}*"),
        # Lists keys anywhere: POST /code (is that archive there?) and admission (POST /jobs, POST /plan: do
        # the manifest's inputs and code exist?). It reads no object outside jobs/.
        (LIST, "*"),
    ],
    # A heartbeat's deadline decision reads the job's progress; its move off spot writes the agent's "notice"
    # command (control.deadline_moves).
    ("agent_api", "jobs"): [(READ, f"{JOBS_PREFIX}*"), (WRITE, f"{JOBS_PREFIX}*/agent/*")],
    # The deadline's return to spot writes the agent's "notice" command (control.deadline_moves).
    ("deadline_return", "jobs"): [(WRITE, f"{JOBS_PREFIX}*/agent/*")],
    # Reads a schedule's manifest; lists the inputs and code it names (the fingerprint of "data changed").
    ("scheduled_run", "jobs"): [(READ, f"{SCHEDULES_PREFIX}*"), (LIST, "*")],
    # Reads archived objects' state (HeadObject) and restores them from Glacier.
    ("api", "archive"): [(("s3:GetObject", "s3:RestoreObject"), "*")],
    # Knows the archive buckets' names only to check a manifest's archive.destination: no access.
    ("submit", "archive"): [],
}


def bucket_grant(actions: tuple[str, ...], pattern: str, logical: str, bucket_arn: str) -> Grant:
    """The statement of one :data:`BUCKET_ACCESS` entry on the bucket ``bucket_arn`` (``logical``, for its reason)."""
    if actions == LIST:
        return Grant(
            LIST,
            (bucket_arn,),
            f"lists keys under '{pattern}' of the {logical} bucket only",
            {"StringLike": {"s3:prefix": [pattern]}},
        )
    where = (
        f"any object of the {logical} bucket (a manifest chooses the keys) and of no other bucket"
        if pattern == "*"
        else f"objects under '{pattern}' of the {logical} bucket only"
    )
    return Grant(actions, (f"{bucket_arn}/{pattern}",), where)
