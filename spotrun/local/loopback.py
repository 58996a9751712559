"""One HTTP server on 127.0.0.1, served from a daemon thread: the life cycle the emulator's servers share.

The metadata service of each simulated instance (:mod:`spotrun.local.instances.imds`), the chaos control API
(:mod:`spotrun.local.control_api`) and the REST API (:mod:`spotrun.local.api.gateway`) each build their own
standard-library server (:mod:`http.server` or :mod:`wsgiref`); this class binds, serves and closes it.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Self

HOST = "127.0.0.1"
POLL_INTERVAL_SECONDS = 0.1  # how long serve_forever may take to notice a shutdown
JOIN_TIMEOUT_SECONDS = 5.0

ServerFactory = Callable[[tuple[str, int]], socketserver.TCPServer]


class LoopbackServer:
    """A server bound to 127.0.0.1 while started; start and stop are idempotent, and it can start again.

    Parameters
    ----------
    build
        Makes the bound server for an address ``(host, port)``; the server's own class decides threading,
        request logging and error handling.
    name
        Names the serving thread and the server in errors, e.g. ``"control-api"``.
    port
        Port to bind; 0 for a free one, chosen at each start.
    """

    def __init__(self, build: ServerFactory, name: str, port: int = 0):
        self._build = build
        self._name = name
        self._port = port
        self._server: socketserver.TCPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL while started, e.g. ``http://127.0.0.1:40123``.

        Raises
        ------
        RuntimeError
            When the server is not started.
        """
        if self._server is None:
            raise RuntimeError(f"{self._name} is not running")
        return f"http://{HOST}:{self._server.server_address[1]}"

    def start(self) -> str:
        """Bind and serve from a daemon thread, unless already started; return the base URL."""
        if self._server is None:
            self._server = self._build((HOST, self._port))
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": POLL_INTERVAL_SECONDS},
                name=self._name,
                daemon=True,
            )
            self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving and free the port (idempotent); later connections are refused."""
        server, self._server = self._server, None
        thread, self._thread = self._thread, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=JOIN_TIMEOUT_SECONDS)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
