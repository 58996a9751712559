"""``spotrun local`` commands that reach a running ``local up`` through its control API: what it runs (instances,
pools), and chaos for it (interruptions, deaths, no capacity, EC2 errors, GPU readings).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from spotrun.cli.display.output import JsonOpt, console, emit_json, fail
from spotrun.cli.target import StateDirOpt, local_state_dir, with_state_dir

if TYPE_CHECKING:
    from spotrun.local.control_client import ControlClient


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
