"""``spotrun local ...``: run the embedded AWS in the foreground, and inject chaos into it from another shell."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from spotrun.cli.display.output import JsonOpt, console, emit_json, fail
from spotrun.cli.target import STATE_DIR_FLAG, StateDirOpt, local_state_dir, with_state_dir

if TYPE_CHECKING:
    from spotrun.local.control_client import ControlClient, LocalState

local_app = typer.Typer(
    help="The embedded AWS emulator as a local service, and chaos for it (interruptions, deaths, no capacity).",
    no_args_is_help=True,
)


@contextmanager
def _control(state_dir: Path | None) -> Iterator[ControlClient]:
    """A client of the running ``local up``; its errors end the command with a message and exit code 1."""
    # Imported here: `spotrun --help` and the API commands never load the emulator's package.
    from spotrun.local.control_client import ControlClient, ControlError, NoLocalRuntime

    try:
        yield ControlClient.for_workdir(local_state_dir(state_dir))
    except (NoLocalRuntime, ControlError) as exc:
        raise fail(exc) from None


def _emit(answer: Any, as_json: bool, text: str) -> None:
    if as_json:
        emit_json(answer)
    else:
        typer.echo(text)


@local_app.command()
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


def _notice(instance: dict[str, Any]) -> str:
    if instance["hung"]:
        return "hung (silent death)"
    action = instance.get("instance_action")
    if action:
        when = str(action["time"])  # RFC 3339, UTC: the time of day is what matters here
        return f"{action['action']} at {when[11:19] or when} UTC"
    return "rebalance recommended" if instance.get("rebalance") else "-"


def instances_table(instances: list[dict[str, Any]]) -> Table:
    """The instances of ``GET /instances`` as a table."""
    table = Table(title="instances", title_justify="left")
    table.add_column("instance", no_wrap=True)
    for column in ("type", "zone", "lifecycle", "state", "spot notice"):
        table.add_column(column)
    for item in instances:
        table.add_row(
            item["instance_id"],
            item["instance_type"],
            item["availability_zone"],
            item["lifecycle"],
            item["state"],
            _notice(item),
        )
    return table


def pools_table(pools: list[dict[str, Any]]) -> Table:
    """The pools of ``GET /pools`` as a table."""
    table = Table(title="spot pools", title_justify="left")
    for column in ("type", "zone", "$/h", "capacity", "in use"):
        table.add_column(column, justify="left" if column in ("type", "zone") else "right")
    for pool in pools:
        table.add_row(
            pool["instance_type"],
            pool["availability_zone"],
            f"{pool['spot_price']:.4f}",
            str(pool["capacity"]),
            str(pool["in_use"]),
        )
    return table


@local_app.command()
@with_state_dir
def instances(state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """List the instances the running runtime launched, terminated ones included (--json: ``{"instances": [...]}``)."""
    with _control(state_dir) as control:
        found = control.instances()
    if as_json:
        emit_json({"instances": found})  # one object, as every --json answer
    elif not found:
        typer.echo("no instances launched yet")
    else:
        console().print(instances_table(found))


@local_app.command()
@with_state_dir
def pools(state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """List the spot pools (instance type x zone) with their price, capacity and instances in use (--json:
    ``{"pools": [...]}``)."""
    with _control(state_dir) as control:
        found = control.pools()
    if as_json:
        emit_json({"pools": found})  # one object, as every --json answer
    else:
        console().print(pools_table(found))


@local_app.command()
@with_state_dir
def interrupt(
    instance_id: Annotated[str, typer.Argument(metavar="INSTANCE", help="A running spot instance.")],
    notice_seconds: Annotated[
        float, typer.Option(min=0, help="Simulated seconds from the warning to termination.")
    ] = 120.0,
    rebalance_lead_seconds: Annotated[
        float, typer.Option(min=0, help="Simulated seconds from the rebalance recommendation to the warning.")
    ] = 0.0,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reclaim a spot instance as AWS FIS does: rebalance recommendation, warning (IMDS and EventBridge),
    termination when the notice ends."""
    with _control(state_dir) as control:
        answer = control.interrupt(instance_id, notice_seconds, rebalance_lead_seconds)
    _emit(
        answer,
        as_json,
        f"interruption warning sent to {instance_id}: terminated in {answer['terminates_in_seconds']:g} s "
        f"({answer['terminates_in_real_seconds']:.1f} s real)",
    )


@local_app.command()
@with_state_dir
def kill(
    instance_id: Annotated[str, typer.Argument(metavar="INSTANCE", help="A running instance.")],
    hang: Annotated[
        bool, typer.Option(help="Leave it looking alive to EC2, answering nothing (no IMDS, no SSM).")
    ] = False,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Kill an instance without notice: its processes die at once, with no chance to checkpoint."""
    with _control(state_dir) as control:
        answer = control.kill(instance_id, hang)
    _emit(answer, as_json, f"{instance_id} {'hangs' if hang else 'killed'}")


@local_app.command()
@with_state_dir
def exhaust(
    instance_type: Annotated[str, typer.Argument(metavar="TYPE", help="e.g. g5.xlarge")],
    zone: Annotated[str, typer.Argument(metavar="ZONE", help="e.g. us-east-1a")],
    on_demand: Annotated[
        bool, typer.Option("--on-demand", help="Exhaust on-demand capacity, not spot.")
    ] = False,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Leave a pool without capacity: launches there fail with InsufficientInstanceCapacity."""
    lifecycle = "on-demand" if on_demand else "spot"
    with _control(state_dir) as control:
        answer = control.exhaust(instance_type, zone, lifecycle)
    _emit(answer, as_json, f"{lifecycle} pool {instance_type} in {zone} exhausted")


@local_app.command()
@with_state_dir
def refill(
    instance_type: Annotated[str, typer.Argument(metavar="TYPE")],
    zone: Annotated[str, typer.Argument(metavar="ZONE")],
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Give a pool back its declared capacity."""
    with _control(state_dir) as control:
        answer = control.refill(instance_type, zone)
    _emit(answer, as_json, f"pool {instance_type} in {zone} refilled to {answer['capacity']}")


@local_app.command("fleet-error")
@with_state_dir
def fleet_error(
    code: Annotated[
        str,
        typer.Argument(
            metavar="CODE",
            help="An EC2 error code, e.g. VcpuLimitExceeded, InvalidLaunchTemplateName.NotFoundException.",
        ),
    ],
    count: Annotated[int, typer.Option(min=1, help="How many CreateFleet calls fail.")] = 1,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make the next CreateFleet calls fail with CODE: capacity codes are waited on, the others fail the job."""
    with _control(state_dir) as control:
        answer = control.fleet_error(code, count)
    _emit(answer, as_json, f"the next {count} CreateFleet call(s) fail with {code} ({answer['kind']})")


@local_app.command("ec2-notfound")
@with_state_dir
def ec2_not_found(
    describe: Annotated[
        int, typer.Option(min=0, help="Launches DescribeInstances answers NotFound for, for a while.")
    ] = 0,
    terminate: Annotated[
        int,
        typer.Option(min=0, help="Launches TerminateInstances answers NotFound for (and leaves running)."),
    ] = 0,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Model EC2's eventual consistency: the next launches are unknown to some calls just after launch."""
    if not (describe or terminate):
        raise fail("give --describe and/or --terminate")
    with _control(state_dir) as control:
        answer = control.ec2_not_found(describe, terminate)
    _emit(answer, as_json, f"next launches hidden: describe {describe}, terminate {terminate}")


def _gpu_line(gpu: dict[str, Any]) -> str:
    driven = [
        f"{label} {gpu[key]:g} %"
        for key, label in (("utilization", "utilization"), ("memory_percent", "memory"))
        if gpu.get(key) is not None
    ]
    return f"GPU {gpu['index']}: " + (", ".join(driven) if driven else "follows its training")


@local_app.command()
@with_state_dir
def gpu(
    instance_id: Annotated[str, typer.Argument(metavar="INSTANCE", help="A running GPU instance.")],
    utilization: Annotated[
        float | None, typer.Option(min=0, max=100, help="Utilization its nvidia-smi reads, percent.")
    ] = None,
    memory_percent: Annotated[
        float | None, typer.Option(min=0, max=100, help="GPU memory used, percent of the GPU's memory.")
    ] = None,
    index: Annotated[
        int | None, typer.Option("--gpu", min=0, help="Only this GPU (default: every GPU of the instance).")
    ] = None,
    reset: Annotated[
        bool,
        typer.Option("--reset", help="Forget the values driven: the readings follow the training again."),
    ] = False,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drive what an instance's GPUs read in its nvidia-smi (the agent's GPU samples, the idle policy), or
    --reset them: by default a GPU reads busy while the instance's training runs and idle otherwise."""
    driven = utilization is not None or memory_percent is not None
    if reset == driven or (reset and index is not None):
        raise fail(
            "give --utilization and/or --memory-percent (with --gpu to pick one), or --reset alone", code=2
        )
    with _control(state_dir) as control:
        answer = control.gpu(instance_id, utilization, memory_percent, index, reset)
    _emit(answer, as_json, "\n".join(f"{instance_id} {_gpu_line(g)}" for g in answer["gpus"]))
