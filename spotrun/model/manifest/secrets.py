"""References to secrets: the shapes ``training.secrets`` accepts, and the deployment's patterns of allowed ones.

A manifest's ``training.secrets`` maps an environment name to a reference, never a value: the agent reads the
value on the instance, with its job's credentials, and puts it in the command's environment only. Two kinds:

- a Secrets Manager secret's complete ARN, optionally followed by a JSON key, a version stage and a version id
  as in ECS's ``valueFrom``: ``arn:aws:secretsmanager:region:account:secret:name-AbCdEf:json-key:version-stage:
  version-id``, where empty parts (``...:name-AbCdEf:key::``) are left out
  (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html). The ARN
  must be complete (its six random characters included): IAM grants name the secret by that ARN;
- an SSM Parameter Store parameter's ARN, ``arn:aws:ssm:region:account:parameter/name`` (a SecureString, read
  with decryption; a String works alike). A bare name is refused: the deployment's allowed references and the
  job's grants are ARNs, and a name alone says neither region nor account.

The deployment allows references by ARN patterns with IAM's wildcards (``*`` any run of characters, ``?`` one),
e.g. ``arn:aws:secretsmanager:us-east-1:123456789012:secret:training/*``: the CDK option ``secret_references``,
which becomes both the job-access role's ceiling and the list admission checks each reference against.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

SecretService = Literal["secretsmanager", "ssm"]

_PARTITION: Final = r"aws(?:-[a-z]+)*"
_REGION: Final = r"[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}"
# A secret's name: letters, digits and /_+=.@- (at most 512), then '-' and the six characters Secrets Manager adds
# (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html, Name).
_SECRET_ARN: Final = (
    rf"^(?P<arn>arn:(?P<partition>{_PARTITION}):secretsmanager:(?P<region>{_REGION}):(?P<account>[0-9]{{12}})"
    r":secret:[A-Za-z0-9/_+=.@-]{1,512}-[A-Za-z0-9]{6})"
    r"(?::(?P<json_key>[^:]*)(?::(?P<version_stage>[^:]*)(?::(?P<version_id>[^:]*))?)?)?$"
)
# A parameter's name: letters, digits and _.-/ (https://docs.aws.amazon.com/systems-manager/latest/userguide/
# sysman-parameter-name-constraints.html); in its ARN the name's leading '/' merges with parameter/'s.
_PARAMETER_ARN: Final = (
    rf"^(?P<arn>arn:(?P<partition>{_PARTITION}):ssm:(?P<region>{_REGION}):(?P<account>[0-9]{{12}})"
    r":parameter/[A-Za-z0-9_.\-/]{1,1011})$"
)
# Both shapes in one pattern without named groups, for the manifest's JSON schema (ECMA-262 and Python alike).
REFERENCE_PATTERN: Final = "|".join(
    re.sub(r"\?P<[a-z_]+>", "", pattern).removeprefix("^").removesuffix("$")
    for pattern in (_SECRET_ARN, _PARAMETER_ARN)
).join(("^(?:", ")$"))
# A deployment's pattern: an ARN of either kind whose resource part may hold IAM's wildcards.
_PATTERN: Final = (
    rf"^arn:{_PARTITION}:(?:secretsmanager:[a-z0-9*?-]+:[0-9*?]+:secret:|ssm:[a-z0-9*?-]+:[0-9*?]+:parameter/)"
    r"[A-Za-z0-9/_+=.@*?-]+$"
)

EXAMPLES: Final = (
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:name-AbCdEf (optionally :json-key, then "
    ":version-stage:version-id) or arn:aws:ssm:us-east-1:123456789012:parameter/name"
)


@dataclass(frozen=True)
class SecretReference:
    """One reference of ``training.secrets``, parsed.

    Attributes
    ----------
    text
        The reference as written.
    service
        ``secretsmanager`` or ``ssm``.
    arn
        The secret's or parameter's ARN, without JSON key or version: what IAM grants name.
    region
        The region in the ARN: where the agent reads it.
    json_key, version_stage, version_id
        A Secrets Manager reference's optional parts (None when absent or empty).
    """

    text: str
    service: SecretService
    arn: str
    region: str
    json_key: str | None = None
    version_stage: str | None = None
    version_id: str | None = None


def parse_reference(text: str) -> SecretReference:
    """Parse a reference of ``training.secrets``.

    Parameters
    ----------
    text
        A Secrets Manager secret's ARN (with ECS's optional ``:json-key:version-stage:version-id``) or an SSM
        parameter's ARN.

    Returns
    -------
    SecretReference
        The parsed reference.

    Raises
    ------
    ValueError
        When ``text`` is neither, saying what is accepted.
    """
    found = re.fullmatch(_SECRET_ARN, text)
    if found:
        return SecretReference(
            text=text,
            service="secretsmanager",
            arn=found["arn"],
            region=found["region"],
            json_key=found["json_key"] or None,
            version_stage=found["version_stage"] or None,
            version_id=found["version_id"] or None,
        )
    found = re.fullmatch(_PARAMETER_ARN, text)
    if found:
        return SecretReference(text=text, service="ssm", arn=found["arn"], region=found["region"])
    if text.startswith("/") or not text.startswith("arn:"):
        raise ValueError(
            f"{text!r} is not an ARN: give the secret's or parameter's full ARN ({EXAMPLES}); a name alone says "
            "neither region nor account, and the deployment's grants are ARNs"
        )
    raise ValueError(
        f"{text!r} is not a Secrets Manager secret's complete ARN nor an SSM parameter's: {EXAMPLES}"
    )


def check_pattern(text: str) -> str:
    """Return ``text`` when it is a pattern of allowed references (an ARN of either kind, IAM wildcards allowed).

    Raises
    ------
    ValueError
        When it is not, naming it.
    """
    if not re.fullmatch(_PATTERN, text):
        raise ValueError(
            f"{text!r} is not a pattern of secret references: an ARN such as "
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:training/* or "
            "arn:aws:ssm:us-east-1:123456789012:parameter/training/*"
        )
    return text


@lru_cache(maxsize=256)
def _wildcards(pattern: str) -> re.Pattern[str]:
    # IAM's resource wildcards: * any run of characters, ? exactly one; everything else literal.
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL
    )


def is_allowed(reference: SecretReference, patterns: Iterable[str]) -> bool:
    """Whether ``reference``'s ARN matches one of the deployment's ``patterns`` (IAM's wildcard matching)."""
    return any(_wildcards(pattern).fullmatch(reference.arn) for pattern in patterns)


def admission_problems(references: dict[str, str], patterns: Iterable[str]) -> list[str]:
    """One line per reference of ``training.secrets`` the deployment does not allow.

    Parameters
    ----------
    references
        The manifest's ``training.secrets`` (validated: each parses).
    patterns
        The deployment's ``secret_references`` (its CDK option): the only ones its job-access role may read.
    """
    allowed = tuple(patterns)
    shown = ", ".join(allowed) or "(none)"
    return [
        f"training.secrets.{name}: {reference} is not a reference this deployment allows (allowed: {shown}); "
        "have the deployer add it to the CDK option secret_references"
        for name, reference in references.items()
        if not is_allowed(parse_reference(reference), allowed)
    ]
