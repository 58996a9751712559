"""``spotrun local up``: the embedded AWS emulator in the foreground, with its control API and the dashboard."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from spotrun.cli.display.output import console, fail
from spotrun.cli.target import STATE_DIR_FLAG, StateDirOpt, local_state_dir, with_state_dir

if TYPE_CHECKING:
    from spotrun.local.control_client import LocalState


@with_state_dir
def up(
    state_dir: StateDirOpt = None,
    time_scale: Annotated[
        float,
        typer.Option(
            min=0.001, help="Real seconds per simulated second: 0.1 makes a 2-minute notice last 12 s."
        ),
    ] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the spot pools' prices and capacities.")] = 0,
    example: Annotated[
        bool, typer.Option(help="Upload the tiny-regression example's code and data into the jobs bucket.")
    ] = True,
    trace: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="A spot trace (../shared/traces/README.md's format) driving the pools' spot capacity and "
            "interruptions, tick by tick, from the start.",
        ),
    ] = None,
    trace_scale: Annotated[
        float | None,
        typer.Option(
            min=1e-6,
            help="Real seconds per trace second (default: the time scale); 0.01 plays a trace hour in 36 s.",
        ),
    ] = None,
    trace_pools: Annotated[
        str | None,
        typer.Option(
            metavar="TYPE/ZONE,...",
            help="The pools the trace drives (default: every pool), e.g. g5.xlarge/us-east-1a.",
        ),
    ] = None,
    notify: Annotated[
        list[str] | None,
        typer.Option(
            metavar="email=ADDRESS|webhook=URL[,events=ended+interrupted+budget+deadline][,jobs=PREFIX]",
            help="Notify an e-mail address (written to the outbox) or a Slack-style webhook of the jobs' events; "
            "repeat for more subscribers (docs/guides/notifications.md).",
        ),
    ] = None,
    dashboard: Annotated[
        bool,
        typer.Option(
            help="Serve the read-only web dashboard of the jobs on 127.0.0.1 (`spotrun dashboard`)."
        ),
    ] = True,
    dashboard_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="The dashboard's port (default 8050; 0 picks a free one).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the emulated deployment in the foreground until Ctrl-C or SIGTERM, with a chaos control API."""
    from spotrun.local.capacity.trace_pools import TraceSetupError, parse_pool_list
    from spotrun.local.demo import control_plane_logs, upload_example
    from spotrun.local.up import AlreadyRunning, connection_help, local_up, notification_help, stop_on_signals
    from spotrun.model.job.record import utc_now
    from spotrun.model.simulation.traces import Trace, TraceError, load_trace

    out = console(soft_wrap=True)
    option = "" if state_dir is None else f"{STATE_DIR_FLAG} {shlex.quote(str(state_dir.resolve()))}"
    directory = local_state_dir(state_dir).resolve()
    if trace is None and (trace_scale is not None or trace_pools is not None):
        raise fail("--trace-scale and --trace-pools need --trace FILE")
    replayed: Trace | None = None
    try:
        replayed = load_trace(trace) if trace is not None else None
        pools = parse_pool_list(trace_pools) if trace_pools is not None else None
    except (TraceError, TraceSetupError) as exc:
        raise fail(exc) from None
    from spotrun.notifications import parse_many

    try:
        notifications = parse_many(notify or ())
    except ValueError as exc:
        raise fail(f"--notify: {exc}") from None

    def told(line: str) -> None:
        out.print(f"[{utc_now():%H:%M:%S}] {line}", markup=False)

    started = local_up(
        directory,
        time_scale,
        seed,
        on_action=told,
        trace=replayed,
        trace_scale=trace_scale,
        trace_pools=pools,
        notifications=notifications,
    )
    with stop_on_signals() as stop:
        try:
            with control_plane_logs(directory / "control-plane.log"), started as (runtime, state):
                if example:
                    upload_example(runtime)
                scaled = runtime.clock.scaled(120)
                out.print(
                    f"[bold]spotrun local[/bold]: AWS emulator on {state.endpoint_url}, time scale {time_scale:g} "
                    f"(a 2-minute spot notice lasts {scaled:g} s)"
                )
                out.print(connection_help(state, option), markup=False)
                if notifications:
                    out.print(notification_help(runtime), markup=False)
                if runtime.trace_pools is not None:
                    replay = runtime.trace_pools
                    out.print(
                        f"spot capacity from the trace {replay.trace.name} ({replay.trace.hours:g} h, a trace "
                        f"hour every {replay.seconds_per_hour:g} s) on {len(replay.pools)} pool(s)",
                        markup=False,
                    )
                with _dashboard(state, dashboard, dashboard_port) as url:
                    if url is not None:
                        out.print(f"dashboard (read-only): {url}", markup=False)
                    out.print(f"control-plane logs: {directory / 'control-plane.log'}; Ctrl-C to stop")
                    while not stop.wait(0.2):
                        pass
                    out.print("stopping...")
        except (AlreadyRunning, TraceSetupError) as exc:
            raise fail(exc) from None
    out.print("stopped")


@contextmanager
def _dashboard(state: LocalState, wanted: bool, port: int | None) -> Iterator[str | None]:
    """The dashboard over the runtime's REST API while the block runs (its URL), or None."""
    if not wanted or not state.api_url:
        yield None
        return
    from spotrun.cli.dashboard.command import serving_beside
    from spotrun.cli.target import local_api_client

    with serving_beside(local_api_client(state.api_url, state.settings.region), port) as server:
        yield None if server is None else server.url
