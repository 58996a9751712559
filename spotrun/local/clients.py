"""The emulator's boto3 clients: one per service and endpoint, from one session, built on first use."""

from __future__ import annotations

import threading
from typing import Any

from spotrun.local.server import FAKE_CREDENTIALS


class EmulatorClients:
    """boto3 clients on the emulator, shared by the threads of the process (clients are thread-safe).

    Parameters
    ----------
    region
        The emulated region.
    """

    def __init__(self, region: str):
        self.region = region
        self._session: Any = None
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str, endpoint: str) -> Any:
        """The client of ``service`` at ``endpoint``, built once."""
        import boto3

        with self._lock:
            key = (service, endpoint)
            if key not in self._clients:
                # One session: its loader caches the service models, which take most of a client's creation.
                if self._session is None:
                    self._session = boto3.session.Session()
                self._clients[key] = self._session.client(
                    service,
                    endpoint_url=endpoint,
                    region_name=self.region,
                    aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                    aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                )
            return self._clients[key]

    def forget(self) -> None:
        """Drop every client (the emulator stopped: its endpoint goes away)."""
        with self._lock:
            self._clients.clear()
