"""How a job is shown to people: the live progress line and the final summary (rich renderables).

The job as JSON data (`--json`, the API) is :mod:`spotrun.records`, which server code imports without rich.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from spotrun.job import INTERRUPTION_REASONS, Attempt, Job, JobStatus, timeline_durations

_STATUS_STYLE = {
    JobStatus.SUCCEEDED: "bold green",
    JobStatus.FAILED: "bold red",
    JobStatus.REJECTED: "bold red",
    JobStatus.CANCELLED: "yellow",
    JobStatus.INTERRUPTED: "yellow",
}


def status_text(status: JobStatus) -> Text:
    """The status, coloured by how it went."""
    return Text(status.value, style=_STATUS_STYLE.get(status, "cyan"))


def timeline_table(job: Job, now: datetime) -> Table:
    """The states the job went through, with how long each took."""
    table = Table(title=f"job {job.job_id}", title_justify="left", expand=False)
    table.add_column("state")
    table.add_column("entered (UTC)")
    table.add_column("duration", justify="right")
    table.add_column("detail", overflow="fold")
    for change, (_, seconds) in zip(job.timeline, timeline_durations(job, now), strict=True):
        terminal = change.status.is_terminal
        table.add_row(
            status_text(change.status),
            change.at.strftime("%H:%M:%S.%f")[:-3],
            "" if terminal else f"{seconds:.1f} s",
            change.detail or "",
        )
    return table


def attempt_steps(attempt: Attempt) -> str:
    """The steps an attempt trained: from the checkpoint it restored (0: from scratch) to the last it reported.

    ``150 -> 164``; ``150 -> end`` once it completed the run; ``150 -> ...`` while it runs; ``-`` for an attempt
    that ended without training or reporting anything.
    """
    start = attempt.restored_step if attempt.restored_step is not None else 0
    if attempt.last_step is not None:
        return f"{start} \u2192 {attempt.last_step}"
    if attempt.end_reason == "completed":
        return f"{start} \u2192 end"
    if attempt.ended_at is None:
        return f"{start} \u2192 \u2026"
    return "-" if attempt.restored_step is None else f"{start} \u2192 ?"


def attempts_table(job: Job) -> Table:
    """One row per instance the job ran on: where, at what price, how it ended, and the work it lost.

    ``steps`` runs from the checkpoint the attempt restored to the last step it reported (see
    :func:`attempt_steps`); ``steps lost`` are the steps it trained past its last committed checkpoint.
    """
    table = Table(title="attempts", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("instance", no_wrap=True)
    for column in ("type", "zone", "lifecycle"):
        table.add_column(column)
    table.add_column("$/h", justify="right")
    table.add_column("ended by")
    table.add_column("steps", no_wrap=True)
    table.add_column("steps lost", justify="right")
    for attempt in job.attempts:
        interrupted = attempt.end_reason in INTERRUPTION_REASONS
        table.add_row(
            str(attempt.number),
            attempt.instance_id,
            attempt.instance_type,
            attempt.availability_zone,
            attempt.lifecycle,
            f"{attempt.price_per_hour:.4f}",
            Text(attempt.end_reason or "running", style="yellow" if interrupted else ""),
            attempt_steps(attempt),
            "-" if attempt.steps_lost is None else str(attempt.steps_lost),
        )
    return table


@dataclass(frozen=True)
class WorkLost:
    """Training work thrown away because capacity went away."""

    steps: int  # summed over the interrupted attempts whose loss is known
    interruptions: int  # attempts that ended by losing their instance
    unknown: int  # of those, how many did not report what they lost


def work_lost(job: Job) -> WorkLost:
    """Sum the steps lost over the attempts that were interrupted (or lost their instance)."""
    interrupted = [a for a in job.attempts if a.end_reason in INTERRUPTION_REASONS]
    return WorkLost(
        steps=sum(a.steps_lost or 0 for a in interrupted),
        interruptions=len(interrupted),
        unknown=sum(1 for a in interrupted if a.steps_lost is None),
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def work_lost_text(lost: WorkLost) -> Text:
    """``work lost to interruptions: 12 steps over 2 interruptions``."""
    line = (
        f"work lost to interruptions: {_plural(lost.steps, 'step')} "
        f"over {_plural(lost.interruptions, 'interruption')}"
    )
    if lost.unknown:
        line += f" (loss unknown for {lost.unknown} of them)"
    return Text(line, style="bold yellow" if lost.steps else "bold")


def final_summary(job: Job, now: datetime) -> Group:
    """Everything a user wants to see when a job has ended."""
    parts: list[Any] = [timeline_table(job, now)]
    if job.attempts:
        parts.append(attempts_table(job))
    lost = work_lost(job)
    if lost.interruptions:
        parts.append(work_lost_text(lost))
    if job.cost is not None:
        parts.append(
            Text(
                f"cost: ${job.cost.usd:.4f} at spot prices, ${job.cost.on_demand_usd:.4f} on demand "
                f"({job.cost.savings_pct:.1f} % saved)",
                style="bold",
            )
        )
    if job.archive:
        archive = Table(title="archived model", title_justify="left")
        archive.add_column("object")
        archive.add_column("storage class")
        archive.add_column("bytes", justify="right")
        for item in job.archive:
            archive.add_row(item.uri, item.storage_class, str(item.size))
        parts.append(archive)
    if job.model_sha256:
        parts.append(Text(f"model sha256: {job.model_sha256}"))
    if job.error is not None:
        lines = [f"{job.error.type}: {job.error.message}"]
        if job.error.exit_code is not None:
            lines.append(f"exit code {job.error.exit_code}")
        lines += job.error.details
        if job.error.log_tail:
            lines += ["--- log tail ---", job.error.log_tail.rstrip()]
        parts.append(Text("\n".join(lines), style="red"))
    parts.append(Text.assemble("status: ", status_text(job.status)))
    return Group(*parts)
