"""``spotrun plan FILE`` and ``spotrun submit FILE --dry-run``: the plan before paying (``POST /plan``).

A table for people: the candidate pools in the order acquisition tries them, with today's spot and on-demand
prices, the first one marked; the estimated cost of ``training.expected_hours``; the deadline policy's first
decision; every problem that would refuse the job. For a multi-node job each pool is where the whole group would
land (every node in it), priced per node and per group-hour, and the plan says whether the nodes get an EFA and
how a lost node is replaced. ``--json`` prints the API's answer as one object. Exit 1
when there are problems (the job would be refused), 0 otherwise. Nothing is submitted.

With ``training.workdir`` (or ``--workdir``) the directory is packed, exactly as ``submit`` packs it (so a
directory too large or holding a link that leaves it is refused here too), but not uploaded: the plan says how
many bytes ``submit`` would upload (fewer: none, when the jobs bucket has that archive already), and the
code is not among what the plan checks exists, since ``submit`` uploads it first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from spotrun.cli.api import ManifestFile, read_manifest
from spotrun.cli.client import SpotrunClient
from spotrun.cli.display.output import JsonOpt, emit_json, fail, show
from spotrun.cli.target import DEFAULT_TARGET, ApiTarget, api_client
from spotrun.cli.workdir.pack import DEFAULT_MAX_BYTES, WorkdirError, packed
from spotrun.cli.workdir.upload import workdir_of

MIB = 1024 * 1024
MaxWorkdirMibOpt = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        help=f"Refuse a workdir holding more than this, MiB unpacked (default {DEFAULT_MAX_BYTES // MIB}).",
        show_default=False,
    ),
]


def _price(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


_TEXT_COLUMNS = ("type", "zone", "lifecycle", "")


def _group_lines(group: dict[str, Any]) -> list[Text]:
    nodes = group["nodes"]
    lines = [
        Text(
            f"group: {nodes} nodes in one pool (one type, one zone, one cluster placement group), launched all "
            "or nothing; each row above is a pool the whole group can land in"
        )
    ]
    if group["efa"]:
        lines.append(Text("network: every node gets an EFA (NCCL over libfabric)"))
    elif group["types_without_efa"]:
        missing = group["types_without_efa"]
        lines.append(
            Text(
                f"network: no EFA ({', '.join(missing)} {'has' if len(missing) == 1 else 'have'} none, and one "
                "launch template serves every type): plain ENA networking",
                style="yellow",
            )
        )
    elif not group["efa_requested"]:
        lines.append(Text("network: no EFA (resources.efa: false): plain ENA networking"))
    else:
        lines.append(Text("network: no EFA (no candidate type)", style="yellow"))
    recovery = (
        f"a lost node: the others kept, a replacement in their pool, the group moves after "
        f"{group['replace_node_minutes']} min without one"
    )
    if group.get("hang_minutes") is not None:
        recovery += f"; a rank stalled {group['hang_minutes']:g} min restarts the group"
    lines.append(Text(recovery))
    return lines


def plan_view(answer: dict[str, Any]) -> Group:
    """The plan as people read it: the pools table, then the estimate, the deadline, skipped pools, problems.

    A multi-node plan's table has a column per node and per group for each price, and the group's lines
    (where it lands, EFA, how a lost node is replaced) follow the table.
    """
    group = answer.get("group")
    title = f"plan: {answer['name']}"
    prices: tuple[str, ...] = ("spot $/h", "on-demand $/h")
    if group:
        times = f"x{group['nodes']}"
        title += f" ($ per hour: one node, then {times} for the group of {group['nodes']} nodes)"
        prices = ("spot", f"spot {times}", "on-demand", f"on-demand {times}")
    table = Table(title=title, title_justify="left")
    for column in ("#", "type", "zone", "lifecycle", *prices, ""):
        table.add_column(column, no_wrap=True, justify="left" if column in _TEXT_COLUMNS else "right")
    for pool in answer["pools"]:
        spot, listed = _price(pool["spot_price_per_hour"]), _price(pool["on_demand_price_per_hour"])
        cells: tuple[str, ...] = (spot, listed)
        if group:
            cells = (
                spot,
                _price(pool.get("group_spot_price_per_hour")),
                listed,
                _price(pool.get("group_on_demand_price_per_hour")),
            )
        table.add_row(
            str(pool["order"]),
            pool["instance_type"],
            pool["availability_zone"],
            pool["lifecycle"],
            *cells,
            "<- first" if pool["first"] else "",
        )
    lines: list[Text | Table] = [table]
    if not answer["pools"]:
        lines.append(Text("no pool would be tried", style="yellow"))
    if group:
        lines += _group_lines(group)
    nodes = answer["nodes"]
    buying = answer["lifecycle"] or "nothing yet (the deadline policy waits for spot)"
    if answer.get("fallback"):
        buying += f", then {answer['fallback']} when spot finds no capacity"
    lines.append(Text(f"buys: {buying}; {nodes} node(s)"))
    estimate = answer.get("estimate")
    if estimate:
        lines.append(
            Text(
                f"estimate for {estimate['hours']:g} h x {estimate['nodes']} node(s): "
                f"spot {_usd(estimate['spot_usd'])}, on-demand {_usd(estimate['on_demand_usd'])} "
                "(first pool, today's price, no interruption)"
            )
        )
    elif not group:  # expected_hours comes with capacity.deadline, which a group refuses
        lines.append(Text("estimate: set training.expected_hours for one", style="dim"))
    if answer.get("deadline"):
        lines.append(Text(f"deadline: {answer['deadline']}"))
    if answer.get("gpu_idle"):
        lines.append(Text(f"idle policy: {answer['gpu_idle']}"))
    for pool in answer.get("skipped") or []:
        lines.append(
            Text(
                f"not tried: {pool['instance_type']} in {pool['availability_zone']}, spot "
                f"{_price(pool['spot_price_per_hour'])} above its limit {_price(pool['limit_per_hour'])}",
                style="yellow",
            )
        )
    workdir = answer.get("workdir")
    if workdir:
        lines.append(
            Text(
                f"workdir: {workdir['path']} packed, {workdir['files']} files; submit would upload "
                f"{workdir['bytes']} bytes (none if the jobs bucket has that archive) as training.code"
            )
        )
    if answer["problems"]:
        lines.append(Text(f"{len(answer['problems'])} problem(s): submit would be refused", style="red"))
        lines += [Text(f"  - {problem}") for problem in answer["problems"]]
    else:
        lines.append(Text("no problem: submit would start the job", style="green"))
    return Group(*lines)


def show_plan(
    manifest: dict[str, Any], directory: Path | None, client: SpotrunClient, max_bytes: int, as_json: bool
) -> None:
    """Ask ``POST /plan`` for ``manifest`` (its workdir packed, not uploaded) and print the answer.

    Raises
    ------
    typer.Exit
        Code 1 when the plan has problems (the job would be refused), or the workdir cannot be packed.
    """
    workdir = None
    if directory is not None:
        try:
            with packed(directory, max_bytes) as archive:
                workdir = {
                    "path": str(directory),
                    "files": archive.files,
                    "bytes": archive.size,
                    "sha256": archive.sha256,
                }
        except WorkdirError as exc:
            raise fail(exc) from None
        # submit uploads the archive and names it in training.code: nothing of it exists to check yet.
        training = {key: value for key, value in manifest["training"].items() if key != "workdir"}
        manifest = {**manifest, "training": training}
    answer = client.plan(manifest)
    if workdir is not None:
        answer["workdir"] = workdir
    if as_json:
        emit_json(answer)
    else:
        show(plan_view(answer))
    if answer["problems"]:
        raise typer.Exit(code=1)


def plan(
    file: ManifestFile,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            file_okay=False,
            help="The job's code, as for submit: packed (not uploaded) to say how much submit would upload.",
        ),
    ] = None,
    max_workdir_mib: MaxWorkdirMibOpt = None,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Show what submitting FILE would do, without paying: pools in order, prices, cost, problems.

    Exit 1 when the job would be refused (every problem listed), 0 when submit would start it.
    """
    manifest, directory, limit = manifest_and_workdir(file, workdir, max_workdir_mib)
    with api_client(target) as client:
        show_plan(manifest, directory, client, limit, as_json)


def manifest_and_workdir(
    file: Path, workdir: Path | None, max_workdir_mib: float | None
) -> tuple[dict[str, Any], Path | None, int]:
    """The manifest, the directory to pack (or None) and its size limit, as ``submit`` reads them."""
    manifest = read_manifest(file)
    if workdir is not None and manifest["training"].get("code"):
        raise fail(f"{file}: training.code is set; --workdir would replace it (remove one of the two)")
    directory = workdir_of(manifest, file, workdir)
    if directory is None and max_workdir_mib is not None:
        raise fail(
            f"{file}: --max-workdir-mib limits a workdir, and there is none (training.workdir or --workdir)"
        )
    limit = DEFAULT_MAX_BYTES if max_workdir_mib is None else int(max_workdir_mib * MIB)
    return manifest, directory, limit
