"""Who signed a request: the runtime's administrative keys, a role session (judged), or nobody (refused).

A request names its access key id in its SigV4 ``Authorization`` header (``Credential=<key>/<scope>``) or, when
presigned, in the ``X-Amz-Credential`` query parameter, and a session's token in ``X-Amz-Security-Token``
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html).

Role sessions are of two kinds in the emulator: each simulated instance's session of the instance role, which
its IMDS hands out (registered in :class:`spotrun.local.api.auth.Callers` at launch), and the sessions moto's
STS issues (the job-access role's, assumed by the API function with a session policy). Both are judged against
the role's policies as moto's IAM holds them, and a session policy when there is one.

The administrative keys are the runtime's own (:data:`spotrun.local.server.FAKE_CREDENTIALS`: the runtime's
clients, the functions running in-process, the CLI against ``spotrun local up``, the tests' administrative
clients) and the fixed keys moto's Step Functions interpreter signs its inner clients with. They stand for the
deployment's administrator and its service roles, which moto's IAM does not model, and are served unjudged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spotrun.local.api.auth import Callers
from spotrun.local.server import ACCOUNT_ID, FAKE_CREDENTIALS

# moto's Step Functions interpreter signs its inner boto3 clients (Lambda invocations, aws-sdk integrations)
# with these fixed keys (moto/stepfunctions/parser/asl/utils/boto_client.py).
MOTO_INTERPRETER_KEY = "ak"
ADMIN_KEYS = (FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"], MOTO_INTERPRETER_KEY)

_CREDENTIAL = re.compile(r"Credential=(?P<key>[^/,\s]+)/")
_SIGV2 = re.compile(r"^AWS (?P<key>[^:\s]+):")

Statement = Mapping[str, Any]


@dataclass(frozen=True)
class Signature:
    """What a request says of its signer: the access key id and the session token (None: absent)."""

    access_key: str | None
    session_token: str | None

    @classmethod
    def of(cls, headers: Any, query: Mapping[str, Any]) -> Signature:
        """Read the signer from the request's headers, else from its query string (a presigned request)."""

        def first(value: Any) -> str | None:
            if isinstance(value, list):
                value = value[0] if value else None
            return str(value) if value else None

        authorization = headers.get("Authorization", "") or ""
        match = _CREDENTIAL.search(authorization) or _SIGV2.match(authorization)
        key = match["key"] if match else None
        if key is None:
            credential = first(query.get("X-Amz-Credential")) or ""
            key = credential.split("/", 1)[0] or first(query.get("AWSAccessKeyId"))
        token = headers.get("X-Amz-Security-Token") or first(query.get("X-Amz-Security-Token"))
        return cls(key, token or None)


@dataclass(frozen=True)
class Principal:
    """A signer the emulator knows.

    ``role_name`` empty: an administrative key, served unjudged. Otherwise a session of that role: judged on
    the role's policies and, when ``session_policy`` is given, on it too.
    """

    arn: str
    role_name: str = ""
    session_token: str | None = None
    expiration: datetime | None = None
    session_policy: Mapping[str, Any] | None = None

    @property
    def judged(self) -> bool:
        """Whether the principal's requests are judged (a role session) or served as the administrator's."""
        return bool(self.role_name)

    def expired(self, now: datetime) -> bool:
        """Whether the session has expired at ``now``."""
        if self.expiration is None:
            return False
        expiration = self.expiration if self.expiration.tzinfo else self.expiration.replace(tzinfo=UTC)
        return now >= expiration


@dataclass
class Identities:
    """The emulator's signers: administrative keys, instances' role sessions, STS's sessions.

    Parameters
    ----------
    callers
        The instances' role sessions (registered at launch).
    now
        The emulator's clock (:meth:`spotrun.local.clock.Clock.now`): sessions expire by it.
    account_id
        The emulated account.
    admin_keys
        Keys served unjudged.
    """

    callers: Callers
    now: Callable[[], datetime]
    account_id: str = ACCOUNT_ID
    admin_keys: Iterable[str] = ADMIN_KEYS
    _admins: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._admins = frozenset(self.admin_keys)

    def principal(self, access_key: str) -> Principal | None:
        """The principal of ``access_key``; None when no one issued it."""
        if access_key in self._admins:
            return Principal(arn=f"arn:aws:iam::{self.account_id}:root")
        instance = self.callers.session(access_key)
        if instance is not None:
            credentials = instance.credentials
            return Principal(
                arn=instance.user_arn,
                role_name=credentials.role_name,
                session_token=credentials.session_token,
                expiration=credentials.expiration,
            )
        from moto.sts.models import sts_backends

        session = sts_backends[self.account_id]["aws"].get_assumed_role_from_access_key(access_key)
        if session is None:
            return None
        return Principal(
            arn=str(session.arn),
            role_name=str(session.role_arn).rsplit("/", 1)[-1],
            session_token=str(session.session_token),
            expiration=session.expiration,
            session_policy=json.loads(session.policy) if session.policy else None,
        )

    def policies(self, principal: Principal) -> list[list[Statement]]:
        """The policies that must each allow a request of ``principal``.

        The role's identity-based policies (inline and attached, as moto's IAM holds them) count as one: any of
        them may allow, an explicit Deny in any refuses. A session policy is a second that must allow too: the
        session's permissions are the intersection
        (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session).
        """
        from moto.iam.exceptions import NotFoundException
        from moto.iam.models import iam_backends

        statements: list[Statement] = []
        documents: list[Any] = []
        try:
            role = iam_backends[self.account_id]["aws"].get_role(principal.role_name)
        except NotFoundException:
            role = None  # a session of a deleted role: nothing allows it
        if role is not None:
            documents += list(role.policies.values())
            for policy in role.managed_policies.values():
                documents += [
                    v.document for v in policy.versions if v.version_id == policy.default_version_id
                ]
        for document in documents:
            statements += _statements(document)
        policies = [statements]
        if principal.session_policy is not None:
            policies.append(_statements(principal.session_policy))
        return policies


def _statements(document: Any) -> list[Statement]:
    parsed = json.loads(document) if isinstance(document, str) else document
    found = parsed.get("Statement", [])
    return list(found) if isinstance(found, list) else [found]
