"""``spotrun dashboard``: serve the read-only web dashboard of the API a command's target names.

Flask is imported when the command runs, not when the CLI loads: ``spotrun --help`` and the other commands work
where the ``report`` extra is not installed.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from spotrun.cli.display.output import console, error_console, fail
from spotrun.cli.target import DEFAULT_TARGET, ApiTarget, api_client

if TYPE_CHECKING:
    from spotrun.cli.client import SpotrunClient
    from spotrun.cli.dashboard.serve import DashboardServer

DEFAULT_HOST = "127.0.0.1"  # spotrun.cli.dashboard.serve's, repeated so that --help loads no Flask
DEFAULT_PORT = 8050
EXTRA_MISSING = "the dashboard needs the report extra (Flask, Jinja2): pip install 'spotrun[report]'"


def dashboard_server(
    client: SpotrunClient, host: str, port: int, *, bind_errors: bool = True
) -> DashboardServer:
    """The dashboard over ``client``, bound to ``host``:``port`` (not serving yet).

    Parameters
    ----------
    client
        The REST API's client, with the caller's credentials.
    host
        Address to bind; a non-loopback one is warned about on stderr (read-only, but unauthenticated).
    port
        Port to bind; 0 picks a free one.
    bind_errors
        End the command when the address cannot be bound; False: raise the ``OSError``.

    Returns
    -------
    DashboardServer
        Bound; ``start()`` serves it in a thread, ``serve_forever()`` in this one.

    Raises
    ------
    typer.Exit
        Exit code 1 when Flask is not installed or (``bind_errors``) the address cannot be bound.
    """
    try:
        from spotrun.cli.dashboard.app import create_app
        from spotrun.cli.dashboard.serve import DashboardServer, is_loopback, trusted_hosts_for
    except ImportError as exc:
        raise fail(f"{EXTRA_MISSING} ({exc})") from None
    app = create_app(client, trusted_hosts=trusted_hosts_for(host))
    try:
        server = DashboardServer(app, host, port)
    except OSError as exc:
        if not bind_errors:
            raise
        raise fail(f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}") from None
    if not is_loopback(host):
        error_console().print(
            Text.assemble(
                ("warning: ", "yellow"),
                f"the dashboard on {host}:{server.port} is read-only but unauthenticated: anyone who reaches that "
                "address sees your jobs, their costs and schedules, read with your credentials",
            )
        )
    return server


@contextmanager
def serving_beside(client: SpotrunClient, port: int | None) -> Iterator[DashboardServer | None]:
    """Serve the dashboard over ``client`` on 127.0.0.1 in a thread for the block (``spotrun local up``'s).

    Parameters
    ----------
    client
        The local runtime's REST API client.
    port
        The port asked for; None: :data:`DEFAULT_PORT`, and when it is taken (another dashboard runs) a warning
        says so and nothing is served, so that the runtime still starts.

    Yields
    ------
    DashboardServer or None
        The running server; None when the default port was taken.

    Raises
    ------
    typer.Exit
        Exit code 1 when a port given explicitly cannot be bound, or Flask is missing.
    """
    try:
        server = dashboard_server(
            client, DEFAULT_HOST, DEFAULT_PORT if port is None else port, bind_errors=port is not None
        )
    except OSError:
        error_console().print(
            Text.assemble(
                ("warning: ", "yellow"),
                f"no dashboard served: port {DEFAULT_PORT} is taken (--dashboard-port N, or --no-dashboard)",
            )
        )
        yield None
        return
    server.start()
    try:
        yield server
    finally:
        server.stop()


def dashboard(
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to serve on; 0 picks a free one.")
    ] = DEFAULT_PORT,
    host: Annotated[
        str,
        typer.Option(
            help="Address to bind. The default serves this machine only; another is unauthenticated for anyone "
            "who reaches it (a warning says so)."
        ),
    ] = DEFAULT_HOST,
    target: ApiTarget = DEFAULT_TARGET,
) -> None:
    """Serve a read-only web dashboard of the jobs, each job's report and the schedules, until Ctrl-C.

    It reads the REST API of the target (`spotrun local up`, or the deployed stack) as `spotrun list` does.

    With your credentials, never a stored secret; it changes nothing.
    """
    with api_client(target) as client:
        client.list_jobs(limit=1)  # a wrong target or refused credentials end here, not on every page
    server = dashboard_server(client, host, port)
    out = console(soft_wrap=True)
    out.print(f"[bold]spotrun dashboard[/bold] on {server.url} reading {client.base_url}; Ctrl-C to stop")
    # Ctrl-C and SIGTERM raise KeyboardInterrupt, which werkzeug's serve_forever catches to return: set here, since
    # a process started with SIGINT ignored (a background job of a script, nohup) inherits that and Python then
    # installs no handler of its own.
    previous = {
        sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        server.serve_forever()
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    out.print("stopped")
