"""The life cycle the emulator's HTTP servers share: bind 127.0.0.1, serve from a thread, stop and free the port."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from spotrun.local.loopback import LoopbackServer

NAME = "loopback-under-test"


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True


# Every server built stays referenced here: without it, dropping the last reference would close a socket
# that stop() forgot to close, and the test of the freed port could not see the difference.
BUILT: list[ThreadingHTTPServer] = []


def _build(address: tuple[str, int]) -> ThreadingHTTPServer:
    BUILT.append(_Server(address, _Hello))
    return BUILT[-1]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own loopback server
        return str(response.read().decode())


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _serving_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == NAME]


def _can_bind(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(autouse=True)
def _close_what_was_built() -> Iterator[None]:
    yield
    for built in BUILT:
        built.server_close()
    BUILT.clear()


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    loopback = LoopbackServer(_build, NAME)
    yield loopback
    loopback.stop()


def test_a_started_server_answers_at_its_url(server: LoopbackServer) -> None:
    # Given a server on a free port
    # When it starts, twice
    url = server.start()
    again = server.start()

    # Then it answers on 127.0.0.1 at the URL it reports, from one daemon thread
    assert url == again == server.url
    assert url.startswith("http://127.0.0.1:")
    assert _get(url) == "hello"
    assert [thread.daemon for thread in _serving_threads()] == [True]


def test_a_stopped_server_frees_its_port_and_its_thread(server: LoopbackServer) -> None:
    # Given a started server
    url = server.start()
    port = _port(url)

    # When it stops
    server.stop()

    # Then its thread has ended, its port can be bound again, and nothing answers there
    assert _serving_threads() == []
    assert _can_bind(port)
    with pytest.raises(urllib.error.URLError):
        _get(url)
    with pytest.raises(RuntimeError, match=f"{NAME} is not running"):
        _ = server.url


def test_stop_is_idempotent_and_the_server_starts_again(server: LoopbackServer) -> None:
    # Given a server stopped before it ever started, then started and stopped twice
    server.stop()
    server.start()
    server.stop()
    server.stop()

    # When it starts again
    url = server.start()

    # Then it serves again
    assert _get(url) == "hello"


def test_a_given_port_is_the_one_bound() -> None:
    # Given a port that is free now
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    # When a server is started on it
    with LoopbackServer(_build, NAME, port=port) as server:
        # Then it serves there
        assert server.url == f"http://127.0.0.1:{port}"
        assert _get(server.url) == "hello"


def test_as_a_context_manager_it_serves_inside_the_block_only() -> None:
    # Given a server used as a context manager
    with LoopbackServer(_build, NAME) as server:
        # When a request is made inside the block, then it is answered
        url = server.url
        assert _get(url) == "hello"

    # Then after the block nothing answers and the thread is gone
    assert _serving_threads() == []
    with pytest.raises(urllib.error.URLError):
        _get(url)
