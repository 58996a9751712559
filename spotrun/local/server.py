"""moto's server on 127.0.0.1 and a free port, inside this process, with Step Functions execution on.

In-process so that the patches apply to the backends the server uses; over HTTP so that agent subprocesses
reach the same emulator as the handlers. Its account and credentials are moto's: every local ARN is in
:data:`ACCOUNT_ID`.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

ACCOUNT_ID = "123456789012"  # moto's default account
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}  # moto accepts any
ENABLE_EXECUTION = {"stepfunctions": {"execute_state_machine": True}}
QUIET_LOGGERS = {
    # One line per request, and the agents poll.
    "werkzeug": logging.ERROR,
    # The ASL interpreter logs every state failure at ERROR with a page of repr, caught ones included; in
    # spotrun failures such as Capacity.Unavailable are control flow, and the execution history has them.
    "moto.stepfunctions.parser.asl.component.eval_component": logging.CRITICAL,
}


class EmbeddedServer:
    """Start and stop one ``ThreadedMotoServer``; its backends are reset on both ends.

    moto's backends are process-wide: resetting them keeps a previous runtime's (or test's) resources out.
    """

    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self._server: Any = None
        self._port: int | None = None
        self._previous_config: dict[str, Any] | None = None
        self._previous_levels: dict[str, int] = {}

    @property
    def port(self) -> int:
        """The port the server listens on."""
        if self._port is None:
            raise RuntimeError("the server is not running")
        return self._port

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Start the server, reset moto's state, enable state machine execution; return the endpoint."""
        from moto.server import ThreadedMotoServer

        for name, level in QUIET_LOGGERS.items():
            self._previous_levels.setdefault(name, logging.getLogger(name).level)
            logging.getLogger(name).setLevel(level)
        self._server = ThreadedMotoServer(ip_address=self.host, port=0, verbose=False)
        self._server.start()
        self._port = int(self._server.get_host_and_port()[1])
        self._post("/moto-api/reset", None)
        self._previous_config = {"stepfunctions": self._get("/moto-api/config").get("stepfunctions", {})}
        self._post("/moto-api/config", ENABLE_EXECUTION)
        return self.endpoint_url

    def stop(self) -> None:
        """Reset moto's state, restore its configuration, stop the server (idempotent)."""
        if self._server is not None and self._port is not None:
            try:
                self._post("/moto-api/reset", None)
                if self._previous_config is not None:
                    self._post("/moto-api/config", self._previous_config)
            finally:
                self._server.stop()
        self._server = None
        self._port = None
        for name, level in self._previous_levels.items():
            logging.getLogger(name).setLevel(level)
        self._previous_levels.clear()

    def _post(self, path: str, body: dict[str, Any] | None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        request = urllib.request.Request(self.endpoint_url + path, data=data, method="POST")  # noqa: S310
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our own local server
            response.read()

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.endpoint_url + path, timeout=30) as response:  # noqa: S310
            return dict(json.loads(response.read()))
