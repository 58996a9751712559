"""``training.secrets`` on the instance: read each reference with the job's credentials, and mask the values.

The stage and train steps each read the job's references when they start (so a new instance, a new attempt,
reads them afresh, and nothing of them is written to disk), with the job's own credentials: the job-access
session, whose policy names exactly the job's references
(:mod:`spotrun.model.agent_protocol.session_policy`). The values go into the environment of the command and
of ``training.setup`` only (:func:`spotrun.agent.supervision.command_environment. child_environment`), never
into the agent's own.

Everything the agent sends off the instance that the job's commands wrote passes :meth:`Masker.mask`: the
attempt's uploaded log, the log tails of failure reports. It replaces each value's exact text (and each line of
a value of several lines) with :data:`MASK`; encodings of a value (base64, URL-quoted, split over writes) are not
recognised, so a script must not print one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from spotrun.model.manifest.secrets import SecretReference, parse_reference

logger = logging.getLogger(__name__)

MASK: Final = "***"

# service name, region -> a boto3 client of that service, signed with the job's credentials.
ClientFactory = Callable[[str, str], Any]


class SecretsUnavailableError(RuntimeError):
    """A reference of ``training.secrets`` could not be read: the job ends ``Secrets.Unavailable``.

    The message names the variable, the reference and why; never a value.
    """


class SecretReader:
    """Reads references from Secrets Manager and Parameter Store.

    Parameters
    ----------
    client_for
        Builds the client of a service in a region (with the job's credentials), once per pair.
    """

    def __init__(self, client_for: ClientFactory):
        self._client_for = client_for
        self._clients: dict[tuple[str, str], Any] = {}

    def _client(self, service: str, region: str) -> Any:
        if (service, region) not in self._clients:
            self._clients[(service, region)] = self._client_for(service, region)
        return self._clients[(service, region)]

    def read(self, reference: SecretReference) -> str:
        """The value ``reference`` names.

        Raises
        ------
        ValueError
            When the value is not text an environment can hold (binary, a NUL, no such JSON key); the message
            holds no part of it.
        Exception
            Whatever the client raises (AccessDenied, ResourceNotFound, ...).
        """
        if reference.service == "ssm":
            answer = self._client("ssm", reference.region).get_parameter(
                Name=reference.arn, WithDecryption=True
            )
            value = str(answer["Parameter"]["Value"])
        else:
            options = {
                key: text
                for key, text in (
                    ("VersionStage", reference.version_stage),
                    ("VersionId", reference.version_id),
                )
                if text
            }
            answer = self._client("secretsmanager", reference.region).get_secret_value(
                SecretId=reference.arn, **options
            )
            if answer.get("SecretString") is None:
                raise ValueError("the secret holds a binary value; an environment variable holds text")
            value = str(answer["SecretString"])
            if reference.json_key is not None:
                value = _json_field(value, reference.json_key)
        if "\x00" in value:
            raise ValueError("the value holds a NUL character, which no environment variable can")
        return value


def _json_field(text: str, key: str) -> str:
    try:
        document = json.loads(text)
    except ValueError:
        raise ValueError(f"the JSON key {key!r} is given, but the secret's value is not JSON") from None
    if not isinstance(document, dict) or key not in document:
        raise ValueError(f"the secret's JSON value has no key {key!r}")
    field = document[key]
    # ECS's rule: a key's value is used as text; a number or boolean in its JSON form.
    return field if isinstance(field, str) else json.dumps(field)


def _reason(exc: Exception) -> str:
    # botocore's ClientError says the operation, the code and AWS's message (ARNs, never the value).
    code = getattr(exc, "response", {}).get("Error", {}).get("Code") if hasattr(exc, "response") else None
    return f"{code}: {exc}" if code else f"{type(exc).__name__}: {exc}"


def resolve_secrets(secrets: Mapping[str, str], reader: SecretReader | None) -> dict[str, str]:
    """Read every reference of ``training.secrets``.

    Parameters
    ----------
    secrets
        Environment name -> reference (validated by the manifest).
    reader
        Where they are read; None when the agent has no job credentials to read them with.

    Returns
    -------
    dict[str, str]
        Environment name -> value.

    Raises
    ------
    SecretsUnavailableError
        At the first reference that cannot be read, naming it and why (never a value).
    """
    values: dict[str, str] = {}
    for name, text in secrets.items():
        if reader is None:
            raise SecretsUnavailableError(
                f"training.secrets.{name}: {text}: the agent has no job credentials"
            )
        try:
            values[name] = reader.read(parse_reference(text))
        except Exception as exc:
            raise SecretsUnavailableError(
                f"training.secrets.{name}: {text} cannot be read ({_reason(exc)})"
            ) from None
        logger.info("read training.secrets.%s from %s", name, text)
    return values


class Masker:
    """Hides secret values in text that leaves the instance.

    Parameters
    ----------
    values
        The secrets' values. Each is hidden where its exact text appears, and so is each line of one of several
        lines (a log holds it line by line); blank lines of a value are not.
    """

    def __init__(self, values: Iterable[str] = ()):
        found = {value for value in values if value}
        for value in list(found):
            found.update(line for line in value.splitlines() if line.strip())
        # Longest first: a value that contains another is hidden whole, not around the shorter one.
        self._values = sorted(found, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._values)

    def mask(self, text: str) -> str:
        """``text`` with every secret value replaced by :data:`MASK`.

        The live log shipper calls this on each line (or batch of whole lines) before it sends them.
        """
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def mask_bytes(self, data: bytes) -> bytes:
        """:meth:`mask` of bytes; what is not UTF-8 is kept byte for byte."""
        if not self._values:
            return data
        return self.mask(data.decode("utf-8", errors="surrogateescape")).encode(
            "utf-8", errors="surrogateescape"
        )
