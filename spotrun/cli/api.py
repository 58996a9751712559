"""What the API commands share: the target options, the client they resolve to, errors, output and tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from spotrun.cli.client import DEFAULT_STACK, ApiError, SpotrunClient, Target, TargetError, resolve_client
from spotrun.cli.local import fail
from spotrun.cli.summary import status_text
from spotrun.local.control_state import WORKDIR_ENV
from spotrun.model.job import Job, JobStatus
from spotrun.model.manifest_io import ManifestError, parse_manifest_text

TargetOpt = Annotated[
    Target | None,
    typer.Option(
        "--target",
        help="local: the running `spotrun local up`; aws: the deployed stack. Default: local when its state "
        "file exists, else aws.",
        show_default=False,
    ),
]
StackOpt = Annotated[
    str, typer.Option("--stack", help="CloudFormation stack of the deployment (aws target).")
]
RegionOpt = Annotated[
    str | None, typer.Option("--region", help="AWS region of the stack (default: the AWS CLI's).")
]
WorkdirOpt = Annotated[
    Path,
    typer.Option(envvar=WORKDIR_ENV, help="Working directory of `spotrun local up` (local target)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's answer as one JSON object.")]
ManifestFile = Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, metavar="FILE")]


@contextmanager
def api_client(
    target: Target | None, workdir: Path, stack: str = DEFAULT_STACK, region: str | None = None
) -> Iterator[SpotrunClient]:
    """The client of the chosen target; API and target errors end the command with exit code 1."""
    try:
        yield resolve_client(target, workdir, stack, region)
    except TargetError as exc:
        raise fail(exc) from None
    except ApiError as exc:
        message = exc.message if exc.status == 0 else f"{exc.message} (HTTP {exc.status})"
        if exc.errors:
            message += "".join(f"\n  - {line}" for line in exc.errors)
        raise fail(message) from None


def read_manifest(file: Path) -> dict[str, Any]:
    """The manifest in ``file`` as the API takes it; every problem found locally ends the command (exit 1)."""
    try:
        manifest = parse_manifest_text(file.read_bytes())
    except ManifestError as exc:
        lines = "".join(f"\n  - {line}" for line in exc.errors)
        raise fail(f"{file}: {len(exc.errors)} problem(s){lines}") from None
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc}") from None
    return manifest.model_dump(mode="json", exclude_none=True)


def console(stderr: bool = False) -> Console:
    """Wide enough for the tables when the output is a file or a pipe; a terminal keeps its own width."""
    out = sys.stderr if stderr else sys.stdout
    return Console(file=out, highlight=False, width=None if out.isatty() else 120)


def emit_json(answer: Any) -> None:
    typer.echo(json.dumps(answer))


def as_job(view: dict[str, Any]) -> Job:
    """The API's job view as a :class:`Job`, for the renderers of :mod:`spotrun.cli.summary`."""
    return Job.model_validate({**view, "source": {"kind": "api"}})


def _when(value: str) -> str:
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    """The jobs of ``GET /jobs`` as a table, newest first."""
    table = Table(title="jobs", title_justify="left")
    table.add_column("job", no_wrap=True)
    for column in ("name", "status", "created (UTC)", "updated (UTC)"):
        table.add_column(column)
    for job in jobs:
        table.add_row(
            job["job_id"],
            job["name"],
            status_text(JobStatus(job["status"]), job.get("error_type")),
            _when(job["created_at"]),
            _when(job["updated_at"]),
        )
    return table


def restore_table(report: dict[str, Any]) -> Table:
    """Where each archived object of a job stands."""
    table = Table(title=f"archived model of {report['job_id']}", title_justify="left")
    for column in ("object", "storage class", "state", "expires"):
        table.add_column(column, overflow="fold")
    styles = {"readable": "green", "in-progress": "cyan", "archived": "yellow", "missing": "red"}
    for item in report["objects"]:
        state = Text(item["state"], style=styles.get(item["state"], ""))
        table.add_row(item["uri"], item["storage_class"], state, item.get("expires") or "-")
    return table


def schedules_table(schedules: list[dict[str, Any]], title: str = "schedules") -> Table:
    """Schedules (or their runs) as a table: whatever scalar fields they carry, the name first."""
    keys: list[str] = []
    for item in schedules:
        keys += [k for k, v in item.items() if k not in keys and not isinstance(v, dict | list)]
    keys.sort(key=lambda k: k != "name")
    table = Table(title=title, title_justify="left")
    for key in keys:
        table.add_column(key.replace("_", " "), overflow="fold")
    for item in schedules:
        table.add_row(*("-" if item.get(k) is None else str(item[k]) for k in keys))
    return table
