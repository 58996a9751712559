"""The one process environment that serves every in-process handler, set on start and restored on stop.

Handlers run concurrently in this process, so swapping variables around each call would race; every function
instead reads the same variables, whose values the deployment's shape makes known in advance.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from spotrun.local.server import FAKE_CREDENTIALS
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME


class ProcessEnvironment:
    """Variables set in ``os.environ`` with their previous values remembered."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}
        self._values: dict[str, str] = {}

    @property
    def values(self) -> dict[str, str]:
        """The variables set (and not removed) so far."""
        return dict(self._values)

    def set(self, values: Mapping[str, str | None]) -> None:
        """Set each variable; a None value removes the variable for the runtime's lifetime."""
        for key, value in values.items():
            self._saved.setdefault(key, os.environ.get(key))
            if value is None:
                os.environ.pop(key, None)
                self._values.pop(key, None)
            else:
                os.environ[key] = value
                self._values[key] = value

    def restore(self) -> None:
        """Give every variable touched its previous value (idempotent)."""
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()
        self._values.clear()


def emulator_environment(region: str) -> dict[str, str | None]:
    """What the emulator's process runs under: fake credentials, the region, Powertools' names (None: unset).

    Set before moto is imported (by the patches): it builds a boto3 session at import time.
    """
    return {
        **FAKE_CREDENTIALS,
        "AWS_SESSION_TOKEN": None,
        "AWS_PROFILE": None,  # a profile missing from ~/.aws would break every client
        "AWS_DEFAULT_PROFILE": None,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
