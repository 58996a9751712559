"""``spotrun local up``'s dashboard wiring: served beside the runtime's REST API unless ``--no-dashboard``.

The runtime is a stand-in (booting the emulator proves nothing here: tests/e2e/test_dashboard_cli.py runs the real
``local up`` with its dashboard); what is under test is the command's choice to serve the dashboard or not.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import spotrun.local.up
from spotrun.cli.app import app
from spotrun.cli.dashboard import command

API_URL = "http://127.0.0.1:4599"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """A stand-in runtime for ``local up``, stopped at once, and the ports the dashboard was served on."""
    runtime = SimpleNamespace(clock=SimpleNamespace(scaled=lambda seconds: seconds * 0.02), trace_pools=None)
    state = SimpleNamespace(
        api_url=API_URL, endpoint_url="http://127.0.0.1:4566", settings=SimpleNamespace(region="us-east-1")
    )
    ports: list[int | None] = []

    @contextmanager
    def fake_local_up(*_args: object, **_kwargs: object) -> Iterator[tuple[object, object]]:
        yield runtime, state

    @contextmanager
    def stopped_at_once() -> Iterator[threading.Event]:
        stop = threading.Event()
        stop.set()  # as if Ctrl-C came as soon as the runtime was up
        yield stop

    @contextmanager
    def fake_serving_beside(client: object, port: int | None) -> Iterator[object]:
        assert client.base_url == API_URL  # type: ignore[attr-defined]  # the runtime's own REST API
        ports.append(port)
        yield SimpleNamespace(url=f"http://127.0.0.1:{port}/")

    monkeypatch.setattr(spotrun.local.up, "local_up", fake_local_up)
    monkeypatch.setattr(spotrun.local.up, "stop_on_signals", stopped_at_once)
    monkeypatch.setattr(spotrun.local.up, "connection_help", lambda *_: "export SPOTRUN_...")
    monkeypatch.setattr(command, "serving_beside", fake_serving_beside)
    return ports


def local_up(tmp_path: Path, *options: str) -> list[str]:
    result = CliRunner().invoke(app, ["local", "up", "--no-example", "--state-dir", str(tmp_path), *options])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_local_up_serves_the_dashboard_of_its_api_on_the_port_given(served, tmp_path):
    # When local up runs with a dashboard port
    lines = local_up(tmp_path, "--dashboard-port", "8123")

    # Then the dashboard was served on that port, over the runtime's API, and its URL printed
    assert served == [8123]
    assert "dashboard (read-only): http://127.0.0.1:8123/" in lines
    assert lines[-1] == "stopped"


def test_local_up_serves_no_dashboard_when_told_not_to(served, tmp_path):
    # When local up runs with --no-dashboard
    lines = local_up(tmp_path, "--no-dashboard")

    # Then it ran to its end without serving a dashboard, and said nothing of one
    assert served == []
    assert lines[-1] == "stopped"
    assert any(line.startswith("control-plane logs: ") for line in lines), lines
    assert not [line for line in lines if "dashboard" in line], lines
