"""S3 access control for the credentials of instances: each job's session reaches only what its policy names.

moto runs S3 without access control, and its IAM evaluation (when enabled) ignores session policies. On AWS an
instance's S3 requests are judged like this, so the emulator judges them too:

- a session of the job-access role (the agent's S3 credentials, assumed by the API function through moto's STS)
  is allowed what both the role's inline policies and its session policy allow: a session's permissions are
  the intersection of the two (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session),
  evaluated by :mod:`spotrun.local.policy_eval`; past its expiry it is refused (``ExpiredToken``);
- an instance's own role session (from its IMDS) reaches nothing of the emulator's buckets: on AWS the instance
  role's only S3 statement is the agent package's object in the CDK asset bucket, which the emulator has not.

Anything else (the runtime's, the functions' and the tests' own credentials) is served as before. A refusal is
S3's: HTTP 403 with the error code ``AccessDenied``
(https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html). The action is the one moto names for the
request (``s3:GetObject`` for GET and HEAD of an object, ``s3:ListBucket`` for a listing, ``s3:PutObject`` for
a put and each multipart step), the resource the object's or the bucket's ARN, and a listing's ``prefix`` is
the ``s3:prefix`` condition key (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html).
DeleteObjects needs ``s3:DeleteObject`` on each key (S3 performs a delete per key and reports each,
https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html): one key denied here fails every key of
the request with ``AccessDenied``, a little stricter than S3, which would still delete the others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from spotrun.local.patches import PatchSet
from spotrun.local.policy_eval import allowed_by_all
from spotrun.local.server import ACCOUNT_ID

_CREDENTIAL = re.compile(r"Credential=(?P<key>[^/,\s]+)/")

IsInstanceKey = Callable[[str], bool]


def _access_key(headers: Any, querystring: dict[str, Any]) -> str | None:
    match = _CREDENTIAL.search(headers.get("Authorization", "") or "")
    if match:
        return match["key"]
    # A presigned URL carries it in the query string instead.
    credential = (querystring.get("X-Amz-Credential") or [""])[0]
    return credential.split("/", 1)[0] or None


def _role_statements(role_arn: str) -> list[dict[str, Any]]:
    from moto.iam.models import iam_backends

    role = iam_backends[ACCOUNT_ID]["aws"].get_role_by_arn(role_arn)
    statements: list[dict[str, Any]] = []
    for document in role.policies.values():
        parsed = json.loads(document) if isinstance(document, str) else document
        found = parsed["Statement"]
        statements += found if isinstance(found, list) else [found]
    return statements


def _session(access_key: str) -> Any:
    from moto.sts.models import sts_backends

    return sts_backends[ACCOUNT_ID]["aws"].get_assumed_role_from_access_key(access_key)


class Verdict(Enum):
    """How a request's credentials fare under :func:`judge_session`."""

    UNJUDGED = "unjudged"  # not a job's session: the runtime's, the functions', the tests' (served as before)
    EXPIRED = "expired"
    ALLOWED = "allowed"
    DENIED = "denied"


def judge_session(
    access_key: str | None,
    action: str,
    resources: Callable[[], list[str]],
    context: dict[str, str] | None = None,
) -> Verdict:
    """Judge a request signed by a session of the job-access role: the role's policy and the session's, both.

    A session's permissions are the intersection of the two
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session); every resource
    must be allowed. ``resources`` is called only for a job's session. The one home of that rule for each
    service the emulator judges (S3 here, CloudWatch Logs, Secrets Manager and Parameter Store).
    """
    session = _session(access_key) if access_key else None
    if session is None or not session.policy:
        return Verdict.UNJUDGED
    if datetime.now(UTC) > session.expiration.replace(tzinfo=UTC):
        return Verdict.EXPIRED
    policies = [_role_statements(session.role_arn), json.loads(session.policy)["Statement"]]
    allowed = all(allowed_by_all(policies, action, resource, context or {}) for resource in resources())
    return Verdict.ALLOWED if allowed else Verdict.DENIED


def _deleted_keys(body: bytes) -> list[str]:
    import xmltodict

    objects = xmltodict.parse(body).get("Delete", {}).get("Object", [])
    return [item["Key"] for item in (objects if isinstance(objects, list) else [objects])]


def install(patches: PatchSet, is_instance_key: IsInstanceKey) -> None:
    """Judge instance credentials' S3 requests as AWS would (see the module's docstring).

    Parameters
    ----------
    patches
        Where the patch is kept (undone when the runtime stops).
    is_instance_key
        Whether an access key id is a simulated instance's own role session.
    """
    from moto.s3.exceptions import BucketAccessDeniedError, S3AccessDeniedError
    from moto.s3.responses import S3Response

    original = S3Response._authenticate_and_authorize_s3_action

    def authorize(self: Any, bucket_name: str | None = None, key_name: str | None = None) -> None:
        access_key = _access_key(self.headers, self.querystring)
        if access_key is not None and is_instance_key(access_key):
            raise BucketAccessDeniedError(bucket=bucket_name) if bucket_name else S3AccessDeniedError()
        # moto's S3 handlers name the IAM action in data["Action"] (its ACTION_MAP) before calling this.
        action = f"s3:{self.data.get('Action') or self._get_action()}"
        bucket_arn = f"arn:aws:s3:::{bucket_name}"

        def resources() -> list[str]:
            if key_name:
                return [f"{bucket_arn}/{key_name}"]
            if action == "s3:DeleteObject":
                return [f"{bucket_arn}/{key}" for key in _deleted_keys(self.body)]
            return [bucket_arn]

        prefix = self.querystring.get("prefix")
        verdict = judge_session(access_key, action, resources, {"s3:prefix": prefix[0]} if prefix else None)
        if verdict is Verdict.UNJUDGED:
            original(self, bucket_name=bucket_name, key_name=key_name)
        elif verdict is Verdict.EXPIRED:
            from moto.s3.exceptions import S3ClientError

            raise S3ClientError("ExpiredToken", "The provided token has expired.")
        elif verdict is Verdict.DENIED:
            raise BucketAccessDeniedError(bucket=bucket_name) if bucket_name else S3AccessDeniedError()

    patches.add(S3Response, "_authenticate_and_authorize_s3_action", authorize)
