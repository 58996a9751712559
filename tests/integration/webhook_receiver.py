"""A webhook receiver on 127.0.0.1 for the notification tests: records each request; answers as it is told."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One request the receiver got."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """What the receiver got, and the statuses it answers with (the next one each time; then 200)."""

    url: str
    requests: list[Received] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def texts(self) -> list[str]:
        with self.lock:
            return [request.json()["text"] for request in self.requests]

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[str]:
        """Wait until ``predicate(texts)`` holds; return the texts (fails with what arrived when it never does)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            texts = self.texts()
            if predicate(texts):
                return texts
            time.sleep(0.05)
        raise AssertionError(f"the webhook got {self.texts()}")


@contextmanager
def webhook_receiver(path: str = "/hook") -> Iterator[Receiver]:
    """Serve a receiver on a free port of 127.0.0.1 while the block runs."""
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with receiver.lock:
                receiver.requests.append(Received(self.command, self.path, dict(self.headers.items()), body))
                status = receiver.answers.pop(0) if receiver.answers else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_PUT = do_POST  # noqa: N815 (http.server's naming)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
