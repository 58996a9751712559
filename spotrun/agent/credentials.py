"""The agent's S3 credentials: its own job's, from the API's credentials route, refreshed before they expire.

The instance role reaches nothing of the jobs bucket. The agent signs ``POST /agent/credentials`` with its
instance's role session and gets a session of the job-access role narrowed to its job and attempt
(:mod:`spotrun.control.job_credentials`); every S3 client of the agent uses them. Such a session lasts at most
an hour, so they are botocore ``DeferredRefreshableCredentials`` fed by the route: botocore asks again ahead of
the expiry (15 minutes before, by its advisory refresh), on the first request and whenever they run short.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from spotrun.agent.reporter import RETRIED_STATUSES, error_message, signed_post
from spotrun.model.agent_protocol.command import CREDENTIALS_URL
from spotrun.model.agent_protocol.session_policy import JobCredentials

logger = logging.getLogger(__name__)


class CredentialsError(RuntimeError):
    """The route refused, or could not be reached for, the job's credentials."""


class JobCredentialsSource:
    """Fetches the job's credentials from the route, signed with the instance's own.

    Parameters
    ----------
    url
        The route (``SPOTRUN_AGENT_CREDENTIALS_URL``, checked against :data:`CREDENTIALS_URL`).
    region
        The API's region (the SigV4 scope).
    signing
        Returns the instance role's current botocore credentials.
    job_id, attempt
        What the credentials are for.
    attempts, backoff_seconds, timeout_seconds
        Tries when the route is unreachable or answers 429/5xx, the wait before the second (doubled after each),
        and the timeout of each.
    """

    def __init__(
        self,
        url: str,
        region: str,
        signing: Callable[[], Any],
        *,
        job_id: str,
        attempt: int,
        attempts: int = 5,
        backoff_seconds: float = 0.5,
        timeout_seconds: float = 20.0,
    ):
        if not re.fullmatch(CREDENTIALS_URL, url):
            raise CredentialsError(f"{url!r} is not the API's credentials route")
        self._url = url
        self._region = region
        self._signing = signing
        self._body = json.dumps({"job_id": job_id, "attempt": attempt}).encode()
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._timeout = timeout_seconds

    def __repr__(self) -> str:
        return f"JobCredentialsSource(url={self._url!r})"

    def fetch(self) -> JobCredentials:
        """Ask the route once (with retries of transient failures).

        Raises
        ------
        CredentialsError
            When it refuses (403 another instance's job, 409 another attempt, 422) or stays unreachable.
        """
        problem = "not sent"
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(self._backoff * 2 ** (attempt - 1))
            request = signed_post(self._url, self._region, self._signing(), self._body)
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310 - the route
                    return JobCredentials.model_validate_json(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRIED_STATUSES:
                    raise CredentialsError(
                        f"credentials refused ({exc.code}): {error_message(exc)}"
                    ) from None
                problem = f"{exc.code}: {error_message(exc)}"
            except ValidationError:
                raise CredentialsError(
                    "the credentials route answered something that is not credentials"
                ) from None
            except (OSError, ValueError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
        raise CredentialsError(f"credentials not received after {self._attempts} tries ({problem})")

    def metadata(self) -> dict[str, str]:
        """:meth:`fetch` in the form botocore's refreshable credentials take."""
        found = self.fetch()
        logger.info("job credentials received, expiring %s", found.expiration.isoformat())
        return {
            "access_key": found.access_key_id,
            "secret_key": found.secret_access_key,
            "token": found.session_token,
            "expiry_time": found.expiration.isoformat(),
        }


def job_session(source: JobCredentialsSource, region: str) -> Any:
    """A boto3 session whose credentials are the job's, fetched on first use and refreshed before expiry."""
    import boto3
    import botocore.session
    from botocore.credentials import DeferredRefreshableCredentials

    core = botocore.session.get_session()
    # botocore's public set_credentials takes static keys only; this attribute is where get_credentials keeps
    # what it found, and once set it is used instead of the provider chain (which would find the instance
    # role's).
    core._credentials = DeferredRefreshableCredentials(  # type: ignore[attr-defined]
        refresh_using=source.metadata, method="spotrun-job"
    )
    return boto3.session.Session(botocore_session=core, region_name=region)
