"""What the API commands share besides their target (:mod:`spotrun.cli.target`): the manifest file they read,
the job view as a :class:`Job`, and their tables."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from spotrun.cli.display.output import fail
from spotrun.cli.display.summary import duration, status_text
from spotrun.model.job.record import Job, JobStatus
from spotrun.model.manifest.parse import ManifestError, parse_manifest_text

# Not `exists=True`: a missing file is refused by read_manifest, which answers --json too (a usage error would not).
ManifestFile = Annotated[Path, typer.Argument(metavar="FILE")]


def read_manifest(file: Path) -> dict[str, Any]:
    """The manifest in ``file`` as the API takes it; every problem found locally ends the command (exit 1)."""
    try:
        manifest = parse_manifest_text(file.read_bytes())
    except ManifestError as exc:
        raise fail(f"{file}: {exc.count} problem(s)", errors=exc.errors) from None
    except OSError as exc:  # missing, a directory, unreadable
        raise fail(f"cannot read {file}: {exc.strerror or exc}") from None
    return manifest.model_dump(mode="json", exclude_none=True)


def as_job(view: dict[str, Any]) -> Job:
    """The API's job view as a :class:`Job`, for the renderers of :mod:`spotrun.cli.display.summary`."""
    return Job.model_validate({**view, "source": {"kind": "api"}})


def _when(value: str) -> str:
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    """The jobs of ``GET /jobs`` as a table, newest first: where each ran, how often it recovered, its cost so
    far and how long it has taken."""
    table = Table(title="jobs", title_justify="left")
    table.add_column("job", no_wrap=True)
    for column in ("name", "status", "type", "lifecycle"):
        table.add_column(column)
    for column in ("recoveries", "cost", "duration"):
        table.add_column(column, justify="right")
    table.add_column("created (UTC)")
    for job in jobs:
        table.add_row(
            job["job_id"],
            job["name"],
            status_text(
                JobStatus(job["status"]),
                job.get("error_type"),
                waiting=bool(job.get("waiting_for_capacity_since")),
            ),
            job.get("instance_type") or "-",
            job.get("lifecycle") or "-",
            str(job.get("recoveries", 0)),
            f"${job.get('cost_usd', 0.0):.4f}",
            duration(job.get("duration_seconds", 0.0)),
            _when(job["created_at"]),
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
