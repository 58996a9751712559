"""The hook every moto request passes through: authenticate the signer, judge a role session, or refuse.

moto calls ``BaseResponse._authenticate_and_authorize_normal_action`` before serving any action of its JSON,
query and REST-JSON services (``BaseResponse.call_action``), and ``S3Response._authenticate_and_authorize_s3_action``
before each S3 operation. Both are replaced here:

- an unsigned request is refused (``MissingAuthenticationToken``; S3 treats it as anonymous: ``AccessDenied``);
- a key no one issued is refused (``UnrecognizedClientException`` for the JSON protocols, ``InvalidClientTokenId``
  for the query ones, ``AuthFailure`` for EC2, ``InvalidAccessKeyId`` for S3), and so is a session's key with
  another session token (``InvalidToken`` for S3);
- the runtime's administrative keys are served as before (:mod:`.identities`);
- a role session past its expiry, by the emulator's clock, is refused (``ExpiredTokenException``, ``ExpiredToken``,
  EC2's ``RequestExpired``);
- a role session is otherwise judged: the action (``<service prefix>:<operation>``) on each resource the
  Service Authorization Reference names for it (:mod:`.resources`), against the role's policies and the session
  policy (:meth:`.identities.Identities.policies`), with IAM's logic
  (:func:`spotrun.local.iam.policy.evaluate.allowed_by_all`); a refusal is the service's
  ``AccessDeniedException`` / ``AccessDenied`` / EC2's ``UnauthorizedOperation``.

Errors and status codes: the services' common errors (e.g.
https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/CommonErrors.html,
https://docs.aws.amazon.com/STS/latest/APIReference/CommonErrors.html,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html,
https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html). S3's ``DeleteObjects`` is judged per key,
as S3 does: refused keys come back under ``Errors`` with ``AccessDenied`` and the others are deleted
(https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html).
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

from werkzeug.exceptions import HTTPException

from spotrun.local.iam import resources as table
from spotrun.local.iam.identities import Identities, Principal, Signature
from spotrun.local.iam.policy.evaluate import allowed_by_all
from spotrun.local.patches.reversible import PatchSet

# moto's service names whose IAM prefix differs.
_PREFIXES = {"stepfunctions": "states", "awslambda": "lambda", "lambda": "lambda"}
# Operations whose IAM action has another name.
_ACTIONS = {"lambda:Invoke": "lambda:InvokeFunction"}
# "No permissions are required to perform this operation."
# (https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html)
_UNCONDITIONAL = frozenset({"sts:GetCallerIdentity"})
_QUERY_SERVICES = frozenset(
    {"sts", "iam", "sqs", "sns", "autoscaling", "cloudformation", "elasticloadbalancing"}
)
_REST_JSON_SERVICES = frozenset({"lambda", "scheduler"})


class Kind(Enum):
    """Why a request is refused."""

    UNSIGNED = "unsigned"
    UNKNOWN_KEY = "unknown key"
    INVALID_TOKEN = "invalid token"  # noqa: S105 - a reason, not a secret
    EXPIRED = "expired"
    DENIED = "denied"


@dataclass(frozen=True)
class Refusal:
    """A refused request: why, by whom, for what."""

    kind: Kind
    action: str
    resource: str = "*"
    principal: str = ""

    @property
    def message(self) -> str:
        """The service's message for it."""
        if self.kind is Kind.UNSIGNED:
            return "Request is missing Authentication Token"
        if self.kind in (Kind.UNKNOWN_KEY, Kind.INVALID_TOKEN):
            return "The security token included in the request is invalid."
        if self.kind is Kind.EXPIRED:
            return "The security token included in the request is expired"
        return (
            f"User: {self.principal} is not authorized to perform: {self.action} on resource: {self.resource} "
            "because no identity-based policy allows the action or an explicit deny applies"
        )


class Judge:
    """Authenticates and judges requests (see the module's docstring).

    Parameters
    ----------
    identities
        Who signs what.
    """

    def __init__(self, identities: Identities):
        self.identities = identities

    def authenticate(self, signature: Signature, action: str) -> Principal | Refusal:
        """The request's principal, or why it is refused before any policy is read."""
        if signature.access_key is None:
            return Refusal(Kind.UNSIGNED, action)
        principal = self.identities.principal(signature.access_key)
        if principal is None:
            return Refusal(Kind.UNKNOWN_KEY, action)
        if not principal.judged:
            return principal
        if signature.session_token != principal.session_token:
            return Refusal(Kind.INVALID_TOKEN, action)
        if principal.expired(self.identities.now()):
            return Refusal(Kind.EXPIRED, action, principal=principal.arn)
        return principal

    def authorize(
        self, principal: Principal, action: str, resources: list[str], context: dict[str, Any]
    ) -> Refusal | None:
        """None when ``principal`` may perform ``action`` on every one of ``resources``."""
        if not principal.judged or action in _UNCONDITIONAL:
            return None
        policies = self.identities.policies(principal)
        for resource in resources:
            if not allowed_by_all(policies, action, resource, context):
                return Refusal(Kind.DENIED, action, resource, principal.arn)
        return None


class _Refused(HTTPException):
    """A refusal as moto's ``call_action`` answers an HTTPException from its authorization: body and status."""

    def __init__(self, status: int, body: str, content_type: str):
        super().__init__()
        self.code = status
        self.description = body
        self._content_type = content_type

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [("Content-Type", self._content_type)]


_JSON_CODES = {
    Kind.UNSIGNED: ("MissingAuthenticationTokenException", 403),
    Kind.UNKNOWN_KEY: ("UnrecognizedClientException", 403),
    Kind.INVALID_TOKEN: ("UnrecognizedClientException", 403),
    Kind.EXPIRED: ("ExpiredTokenException", 403),
    Kind.DENIED: ("AccessDeniedException", 400),
}
_QUERY_CODES = {
    Kind.UNSIGNED: ("MissingAuthenticationToken", 403),
    Kind.UNKNOWN_KEY: ("InvalidClientTokenId", 403),
    Kind.INVALID_TOKEN: ("InvalidClientTokenId", 403),
    Kind.EXPIRED: ("ExpiredToken", 403),
    Kind.DENIED: ("AccessDenied", 403),
}
_EC2_CODES = {
    Kind.UNSIGNED: ("MissingAuthenticationToken", 401),
    Kind.UNKNOWN_KEY: ("AuthFailure", 401),
    Kind.INVALID_TOKEN: ("AuthFailure", 401),
    Kind.EXPIRED: ("RequestExpired", 400),
    Kind.DENIED: ("UnauthorizedOperation", 403),
}


def _error(prefix: str, refusal: Refusal) -> _Refused:
    from xml.sax.saxutils import escape

    message = refusal.message
    if prefix == "ec2":
        code, status = _EC2_CODES[refusal.kind]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
            f"<Code>{code}</Code><Message>{escape(message)}</Message></Error></Errors>"
            f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
        )
        return _Refused(status, body, "text/xml")
    if prefix in _QUERY_SERVICES:
        code, status = _QUERY_CODES[refusal.kind]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><ErrorResponse><Error><Type>Sender</Type>'
            f"<Code>{code}</Code><Message>{escape(message)}</Message></Error>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )
        return _Refused(status, body, "text/xml")
    code, status = _JSON_CODES[refusal.kind]
    if prefix in _REST_JSON_SERVICES and refusal.kind is Kind.DENIED:
        status = 403  # REST-JSON services answer AccessDeniedException with 403 (Lambda's common errors)
    return _Refused(
        status, json.dumps({"__type": code, "message": message, "Message": message}), "application/json"
    )


def _s3_error(refusal: Refusal, bucket: str | None) -> Exception:
    from moto.s3 import exceptions as s3

    if refusal.kind is Kind.UNKNOWN_KEY:
        return s3.BucketInvalidAccessKeyIdError(bucket=bucket) if bucket else s3.S3InvalidAccessKeyIdError()
    if refusal.kind is Kind.INVALID_TOKEN:
        return s3.BucketInvalidTokenError(bucket=bucket) if bucket else s3.S3InvalidTokenError()
    if refusal.kind is Kind.EXPIRED:
        return s3.S3ClientError("ExpiredToken", "The provided token has expired.")
    # Unsigned: an anonymous request, which nothing in the emulator's buckets grants.
    return s3.BucketAccessDeniedError(bucket=bucket) if bucket else s3.S3AccessDeniedError()


def iam_action(response: Any) -> str:
    """The IAM action of a request moto is about to serve (``states:SendTaskSuccess``)."""
    service = str(response.service_name or "")
    action = f"{_PREFIXES.get(service, service)}:{response._get_action()}"
    return _ACTIONS.get(action, action)


def _request(response: Any, action: str) -> table.Request:
    return table.Request(action=action, region=str(response.region), param=response._get_param)


# moto's server routes a request to a service by its signature's credential scope; an unsigned one it routes by
# a short list of target prefixes, and otherwise to S3, where it is refused as anonymous. These JSON services'
# unsigned requests reach their own service instead, to be refused as that service refuses them.
_UNSIGNED_TARGETS = {
    "DynamoDB_20120810": "dynamodb",
    "AmazonSSM": "ssm",
    "Logs_20140328": "logs",
    "AWSStepFunctions": "stepfunctions",
    "secretsmanager": "secretsmanager",
    "AWSEvents": "events",
    "TrentService": "kms",
}


class _Deleting(threading.local):
    """The principal of the DeleteObjects request this server thread is serving (None: no judged one)."""

    principal: Principal | None = None


def install(patches: PatchSet, judge: Judge) -> None:
    """Judge every request moto serves (see the module's docstring).

    Parameters
    ----------
    patches
        Where the patches are kept (undone when the runtime stops).
    judge
        The judge.
    """
    from moto.core.responses import BaseResponse
    from moto.iam.access_control import PermissionResult
    from moto.moto_server import werkzeug_app
    from moto.s3.models import FakeBucket
    from moto.s3.responses import S3Response

    routed = {prefix: (service, "us-east-1") for prefix, service in _UNSIGNED_TARGETS.items()}
    patches.add(werkzeug_app, "UNSIGNED_REQUESTS", {**werkzeug_app.UNSIGNED_REQUESTS, **routed})
    normal_original = BaseResponse._authenticate_and_authorize_normal_action
    s3_original = S3Response._authenticate_and_authorize_s3_action
    permission_original = FakeBucket.get_permission
    key_original = S3Response._key_response
    deleting = _Deleting()

    def normal(self: Any, resource: str = "*") -> None:
        action = iam_action(self)
        prefix = action.split(":", 1)[0]
        found = judge.authenticate(Signature.of(self.headers, self.querystring), action)
        if isinstance(found, Refusal):
            raise _error(prefix, found)
        if found.judged:
            request = _request(self, action)
            refusal = judge.authorize(found, action, table.resources(request), table.context(request))
            if refusal is not None:
                raise _error(prefix, refusal)
            return
        normal_original(self, resource)

    def s3(self: Any, bucket_name: str | None = None, key_name: str | None = None) -> None:
        deleting.principal = None
        # moto's S3 handlers name the IAM action in data["Action"] (its ACTION_MAP) before calling this.
        action = f"s3:{self.data.get('Action') or self._get_action()}"
        found = judge.authenticate(Signature.of(self.headers, self.querystring), action)
        if isinstance(found, Refusal):
            raise _s3_error(found, bucket_name)
        if not found.judged:
            s3_original(self, bucket_name=bucket_name, key_name=key_name)
            return
        if action == "s3:DeleteObject" and key_name is None:
            deleting.principal = found  # DeleteObjects: judged per key (FakeBucket.get_permission below)
            return
        bucket = f"arn:aws:s3:::{bucket_name}" if bucket_name else "*"
        checks = [(action, f"{bucket}/{key_name}" if key_name else bucket)]
        source = table.s3_copy_source(self.headers)
        if source is not None and action == "s3:PutObject":
            checks.append(("s3:GetObject", source))  # a copy reads its source
        prefix = self.querystring.get("prefix")
        context = {"s3:prefix": prefix[0]} if prefix else {}
        for checked, resource in checks:
            refusal = judge.authorize(found, checked, [resource], context)
            if refusal is not None:
                raise _s3_error(refusal, bucket_name)

    def key_response(self: Any, request: Any, full_url: str) -> Any:
        # moto answers an anonymous object request itself, before any authorization, with an empty 403; S3 refuses
        # it with AccessDenied, which nothing in the emulator's buckets (public access blocked) would grant.
        if Signature.of(request.headers, self.querystring).access_key is None:
            bucket = self.parse_bucket_name_from_url(request, full_url)
            raise _s3_error(Refusal(Kind.UNSIGNED, "s3:*"), bucket)
        return key_original(self, request, full_url)

    def get_permission(self: Any, action: str, resource: str) -> Any:
        principal = deleting.principal
        refused = principal is not None and action == "s3:DeleteObject"
        if refused and judge.authorize(principal, action, [resource], {}) is not None:  # type: ignore[arg-type]
            return PermissionResult.DENIED
        return permission_original(self, action, resource)

    patches.add(BaseResponse, "_authenticate_and_authorize_normal_action", normal)
    patches.add(S3Response, "_authenticate_and_authorize_s3_action", s3)
    patches.add(S3Response, "_key_response", key_response)
    patches.add(FakeBucket, "get_permission", get_permission)
