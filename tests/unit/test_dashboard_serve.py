"""Serving the dashboard: which hosts it trusts, its server's life, a taken port, an exposed address."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import typer

from spotrun.cli.dashboard import command
from spotrun.cli.dashboard.app import create_app
from spotrun.cli.dashboard.serve import DashboardServer, is_loopback, trusted_hosts_for
from tests.unit.test_dashboard_app import CannedClient


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("0.0.0.0", False)],  # noqa: S104
)
def test_only_the_loopback_interface_counts_as_this_machine(host, loopback):
    assert is_loopback(host) is loopback


def test_the_trusted_host_names_follow_the_bound_address():
    # Then a loopback bind trusts the loopback names, a named one its name, every interface or IPv6 any name
    assert trusted_hosts_for("127.0.0.1") == ["127.0.0.1", "localhost"]
    assert trusted_hosts_for("127.0.0.2") == ["127.0.0.2", "127.0.0.1", "localhost"]
    assert trusted_hosts_for("box.lan") == ["box.lan"]
    assert trusted_hosts_for("0.0.0.0") is None  # noqa: S104
    assert trusted_hosts_for("::1") is None


def test_the_server_serves_the_pages_until_stopped():
    # Given the dashboard on a free port
    server = DashboardServer(create_app(CannedClient()), "127.0.0.1", 0)

    # When it is started, asked for the job list, then stopped
    url = server.start()
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - the test's own server
        page = answer.read().decode()
    server.stop()

    # Then it served the list, and then nothing answers there any more
    assert url.startswith("http://127.0.0.1:")
    assert "job-20261207-running" in page
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)  # noqa: S310


def test_a_taken_port_ends_the_command_with_its_reason(taken_port, capsys):
    # When the dashboard is asked to serve on a port another program holds
    with pytest.raises(typer.Exit) as ended:
        command.dashboard_server(CannedClient(), "127.0.0.1", taken_port)  # type: ignore[arg-type]

    # Then the command fails, saying where and why
    assert ended.value.exit_code == 1
    assert (
        f"cannot serve the dashboard on 127.0.0.1:{taken_port}: Address already in use"
        in capsys.readouterr().err
    )


def test_local_up_warns_and_goes_on_when_the_default_port_is_taken(taken_port, monkeypatch, capsys):
    # Given the default port held by another program (another dashboard)
    monkeypatch.setattr(command, "DEFAULT_PORT", taken_port)

    # When local up serves the dashboard with no port given, then with that port given
    with command.serving_beside(CannedClient(), None) as server:  # type: ignore[arg-type]
        warned = capsys.readouterr().err
    with pytest.raises(typer.Exit), command.serving_beside(CannedClient(), taken_port):  # type: ignore[arg-type]
        pass

    # Then the default one is given up with a warning naming the options, the one asked for is a failure
    assert server is None
    assert (
        f"no dashboard served: port {taken_port} is taken (--dashboard-port N, or --no-dashboard)" in warned
    )


def test_local_up_serves_the_dashboard_for_its_block():
    # When local up serves the dashboard on a free port
    with command.serving_beside(CannedClient(), 0) as server:  # type: ignore[arg-type]
        assert server is not None
        with urllib.request.urlopen(server.url, timeout=5) as answer:  # noqa: S310
            status = answer.status

    # Then it answered during the block only
    assert status == 200
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=2)  # noqa: S310


def test_an_address_beyond_this_machine_is_warned_about_and_trusts_any_host_name(capsys):
    # When the dashboard is bound to every interface
    server = command.dashboard_server(CannedClient(), "0.0.0.0", 0)  # type: ignore[arg-type]  # noqa: S104
    try:
        url = server.start()
        request = urllib.request.Request(url, headers={"Host": "box.lan"})  # noqa: S310
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
            status = answer.status
    finally:
        server.stop()

    # Then the user is told it is unauthenticated, and the names the network gives it are served
    assert (
        f"the dashboard on 0.0.0.0:{server.port} is read-only but unauthenticated" in capsys.readouterr().err
    )
    assert status == 200
