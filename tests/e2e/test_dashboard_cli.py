"""``spotrun local up`` serves the dashboard, and ``spotrun dashboard`` serves it against that runtime's API: both
as a user types them, in their own processes. (``--no-dashboard`` needs no second emulator to be shown:
tests/unit/test_dashboard_local_up.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

STARTUP_SECONDS = 120.0
IGNORING_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


class Command:
    """A ``spotrun`` command running in its own process, its output read line by line as it comes."""

    def __init__(self, *args: str, env: dict[str, str], sigint_ignored: bool = False):
        # Started as a background job of a script starts it when asked: SIGINT ignored, which exec keeps.
        launcher = ["-c", IGNORING_SIGINT] if sigint_ignored else []
        self.process = subprocess.Popen(
            [sys.executable, *launcher, "-m", "spotrun.cli.app", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = STARTUP_SECONDS) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"never printed {pattern!r}:\n" + "\n".join(self.lines))

    def stop(self) -> int:
        """Ctrl-C, as a user stops it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self._reader.join(timeout=5)


def get(url: str, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - the test's own servers
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def local_up(tmp_path_factory) -> Iterator[tuple[Command, Path, str, dict[str, str]]]:
    """``spotrun local up`` with its dashboard on a free port: the command, its state directory, the URL."""
    state_dir = tmp_path_factory.mktemp("state")
    # No AWS of the machine's may be reached: the commands find the runtime from its state directory only.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "SPOTRUN_"))}
    env["SPOTRUN_LOCAL_STATE_DIR"] = str(state_dir)
    up = Command("local", "up", "--no-example", "--dashboard-port", "0", env=env)
    try:
        url = up.wait_for(r"dashboard \(read-only\): (http://127\.0\.0\.1:\d+/)")[1]
        yield up, state_dir, url, env
    finally:
        assert up.stop() == 0, "\n".join(up.lines)


def test_local_up_serves_the_dashboard_of_its_api_on_loopback(local_up):
    up, _, url, _ = local_up
    # When its dashboard is asked for the job list, then sent a change, then asked under another host name
    status, page = get(url)
    refused = urllib.request.Request(url, method="POST", data=b"{}")  # noqa: S310
    with pytest.raises(urllib.error.HTTPError) as post:
        urllib.request.urlopen(refused, timeout=30)  # noqa: S310
    rebound, _ = get(url, Host="attacker.example")

    # Then it reads the runtime's REST API (which has no job yet), and refuses the rest
    api_url = up.wait_for(r"REST API .*?: (http://127\.0\.0\.1:\d+)")[1]
    assert status == 200
    assert "No jobs yet" in page
    assert f"Reading {api_url}" in page
    assert post.value.code == 405
    assert rebound == 400


def test_spotrun_dashboard_serves_the_targets_api_until_interrupted(local_up):
    _, _, _, env = local_up
    # When `spotrun dashboard` is started against the running local up (its default target), with SIGINT ignored
    # as a script's background job starts it
    board = Command("dashboard", "--port", "0", env=env, sigint_ignored=True)
    try:
        url = board.wait_for(r"spotrun dashboard on (http://127\.0\.0\.1:\d+/) reading (http://\S+);")[1]
        status, page = get(url + "schedules")
    finally:
        # Then it serves until Ctrl-C, and exits cleanly
        code = board.stop()
    assert status == 200
    assert "No schedules" in page
    assert code == 0, "\n".join(board.lines)
    assert board.lines[-1] == "stopped"


def test_spotrun_dashboard_refuses_a_port_in_use_and_warns_about_an_open_address(local_up):
    _, _, url, env = local_up
    taken = url.rsplit(":", 1)[1].rstrip("/")
    # When `spotrun dashboard` is asked for the port local up's dashboard holds
    clash = subprocess.run(
        [sys.executable, "-m", "spotrun.cli.app", "dashboard", "--port", taken],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # And when it is bound to every interface
    open_board = Command("dashboard", "--port", "0", "--host", "0.0.0.0", env=env)  # noqa: S104
    try:
        open_board.wait_for(r"spotrun dashboard on ")
    finally:
        open_board.stop()

    # Then the first fails naming the port, and the second says that anyone who reaches it reads the jobs
    assert clash.returncode == 1
    assert f"cannot serve the dashboard on 127.0.0.1:{taken}: Address already in use" in clash.stderr
    assert any("read-only but unauthenticated" in line for line in open_board.lines), open_board.lines
