"""Serving the dashboard: werkzeug's threaded WSGI server, on 127.0.0.1 unless told otherwise.

werkzeug's server (Flask's own, already installed with it) is the one used: the dashboard is a local tool for
one user, whose browser asks for a fragment every few seconds; a thread per request serves that, and a
production server (gunicorn, waitress) would add a dependency for a load that never comes. It is not meant for
the open network: bound elsewhere than the loopback interface, anyone who reaches the port reads the jobs (the
command says so).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any

from flask import Flask
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from spotrun.cli.dashboard.app import LOOPBACK_HOSTS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8050
_WILDCARDS = {"", "0.0.0.0", "::"}  # noqa: S104 - names of "every interface", recognised to be warned about


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def trusted_hosts_for(host: str) -> list[str] | None:
    """The ``Host`` names the app accepts when the server binds ``host``; None: any.

    Bound to one IPv4 address or name, the browser's ``Host`` is that name or, on loopback, ``localhost``; any
    other name is refused, so a DNS name rebound to the address cannot make a visited web page read the
    dashboard. Bound to every interface (``0.0.0.0``) the names are unknown, and an IPv6 literal cannot be
    listed (werkzeug matches list entries without brackets): then any name is accepted.
    """
    if host in _WILDCARDS or ":" in host:
        return None
    names = [host, *LOOPBACK_HOSTS] if is_loopback(host) else [host]
    return list(dict.fromkeys(names))


class _QuietHandler(WSGIRequestHandler):
    """Logs errors only: the pages poll every few seconds, and a line per request would bury the terminal."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if str(code).startswith("5"):
            super().log_request(code, size)


class DashboardServer:
    """The dashboard app served on ``host``:``port`` by a threaded WSGI server.

    Parameters
    ----------
    app
        The Flask app (:func:`spotrun.cli.dashboard.app.create_app`).
    host
        The address to bind.
    port
        The port; 0 picks a free one.

    Raises
    ------
    OSError
        When the address cannot be bound (the port is taken, the host is not this machine's).
    """

    def __init__(self, app: Flask, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        # Bound here, and handed to werkzeug as a descriptor: werkzeug's own bind prints and exits the process on
        # an error, where the caller wants the OSError (to say which port, or to go on without the dashboard).
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.create_server((host, port), family=family) as bound:
            self._server: BaseWSGIServer = make_server(
                host, port, app, threaded=True, request_handler=_QuietHandler, fd=bound.fileno()
            )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on (the one picked, when 0 was asked for)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Where a browser opens the dashboard."""
        address, port = self._server.server_address[:2]
        host = address.decode() if isinstance(address, bytes) else str(address)
        shown = "127.0.0.1" if host == "0.0.0.0" else host  # noqa: S104 - a reachable name for "every interface"
        return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` is called from another (or the process is interrupted)."""
        self._server.serve_forever()

    def start(self) -> str:
        """Serve in a daemon thread; return the URL."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="spotrun-dashboard", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> DashboardServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
