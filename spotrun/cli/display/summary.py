"""How a job is shown to people: the live progress line and the final summary (rich renderables).

The job as JSON data (`--json`, the API) is :mod:`spotrun.control.views.job_json`, which server code imports
without rich.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from spotrun.model.capacity.pricing import CostReport
from spotrun.model.capacity.wait import wait_line
from spotrun.model.job.attempt import INTERRUPTION_REASONS, Attempt
from spotrun.model.job.record import Job, JobStatus, timeline_durations

_STATUS_STYLE = {
    JobStatus.SUCCEEDED: "bold green",
    JobStatus.FAILED: "bold red",
    JobStatus.REJECTED: "bold red",
    JobStatus.CANCELLED: "yellow",
    JobStatus.INTERRUPTED: "yellow",
}


def status_text(status: JobStatus, error_type: str | None = None, waiting: bool = False) -> Text:
    """The status, coloured by how it went; ``FAILED (Budget.Exceeded)`` when the error type is given,
    ``ACQUIRING (waiting)`` while ``waiting`` for capacity."""
    label = f"{status.value} ({error_type})" if error_type and status is JobStatus.FAILED else status.value
    if waiting and not status.is_terminal:
        return Text(f"{label} (waiting)", style="yellow")
    return Text(label, style=_STATUS_STYLE.get(status, "cyan"))


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: a duration as people read it."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def progress_text(progress: dict[str, Any], now: datetime) -> Text:
    """``now: attempt 2, step 164; last committed checkpoint step 150, 42 s ago; cost so far $0.0012``.

    Parameters
    ----------
    progress
        The ``progress`` of the API's job view (a job that has not ended).
    now
        To say how long ago the checkpoint was committed.
    """
    parts = []
    if progress.get("attempt") is not None:
        step = progress.get("step")
        parts.append(
            f"attempt {progress['attempt']}, " + ("no step reported yet" if step is None else f"step {step}")
        )
    checkpoint = progress.get("checkpoint_step")
    if checkpoint is None:
        parts.append("no committed checkpoint yet")
    else:
        at = progress.get("checkpoint_committed_at")
        ago = "" if at is None else f", {duration((now - datetime.fromisoformat(at)).total_seconds())} ago"
        parts.append(f"last committed checkpoint step {checkpoint}{ago}")
    parts.append(f"cost so far ${progress['cost_usd']:.4f}")
    return Text("now: " + "; ".join(parts), style="bold cyan")


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
    for attempt in [*job.attempts, *job.unused_instances]:
        interrupted = attempt.end_reason in INTERRUPTION_REASONS
        table.add_row(
            str(attempt.number),
            attempt.instance_id,
            attempt.instance_type,
            attempt.availability_zone,
            attempt.lifecycle,
            "unknown" if attempt.price_per_hour is None else f"{attempt.price_per_hour:.4f}",
            Text(attempt.end_reason or "running", style="yellow" if interrupted else ""),
            attempt_steps(attempt),
            "-" if attempt.steps_lost is None else str(attempt.steps_lost),
        )
    return table


def nodes_table(job: Job) -> Table | None:
    """For a multi-node job: one row per node of each attempt, so each node's story reads down the table.

    ``kept`` marks a healthy node carried into the next attempt (never terminated); ``from #n`` a node kept
    from attempt n. None for a single-node job.
    """
    if not any(attempt.nodes for attempt in job.attempts):
        return None
    table = Table(title="nodes", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("node", justify="right")
    table.add_column("instance", no_wrap=True)
    table.add_column("address")
    table.add_column("since")
    table.add_column("warned")
    table.add_column("ended by")
    for attempt in job.attempts:
        for node in attempt.nodes:
            since = "launched" if node.kept_from is None else f"kept from #{node.kept_from}"
            lost = node.end_reason in INTERRUPTION_REASONS
            table.add_row(
                str(attempt.number),
                str(node.node),
                node.instance_id,
                node.private_ip or "-",
                since,
                "yes" if node.notice_at is not None else "",
                Text(node.end_reason or "running", style="yellow" if lost else ""),
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


def save_failures_text(job: Job) -> Text | None:
    """One line per attempt whose command died after the checkpoint signal without saving (``save_failed``).

    ``attempt 1: the command died during its save (exit code 1 after SIGTERM, step 45 not saved: RuntimeError:
    ...); the work resumed from an earlier checkpoint, 25 steps lost``; None when every save made it.
    """
    lines = []
    for attempt in job.attempts:
        if attempt.save_failed is None:
            continue
        line = f"attempt {attempt.number}: the command died during its save ({attempt.save_failed})"
        if attempt.steps_lost is not None:
            line += (
                f"; the work resumed from an earlier checkpoint, {_plural(attempt.steps_lost, 'step')} lost"
            )
        lines.append(line)
    return Text("\n".join(lines), style="bold red") if lines else None


def price_sources_line(job: Job) -> str:
    """``prices: 2 instances from spot-price-history, 1 from on-demand-table``: where each $/h came from."""
    counts: dict[str, int] = {}
    for instance in job.billed_instances():
        source = instance.price_source or "not recorded"
        counts[source] = counts.get(source, 0) + 1
    parts = [f"{_plural(count, 'instance')} from {source}" for source, count in counts.items()]
    return "prices: " + ", ".join(parts)


def cost_lines(cost: CostReport) -> list[str]:
    """The cost, each figure labelled by how it was bought, and a saving only where one was compared.

    ``cost: $0.0123 at spot prices (2 instances)``; an on-demand run says ``at on-demand prices`` and claims no
    saving; a mixed run is split; a saving is shown against the on-demand price of the same instance-seconds,
    with the table's date, and "unknown" where no on-demand figure exists for the instance's region.
    """
    parts = []
    if cost.spot_instances:
        parts.append((cost.spot_usd, f"at spot prices ({_plural(cost.spot_instances, 'instance')})"))
    if cost.on_demand_instances:
        parts.append(
            (cost.on_demand_usd, f"at on-demand prices ({_plural(cost.on_demand_instances, 'instance')})")
        )
    if len(parts) == 1:
        first = f"cost: ${cost.usd:.4f} {parts[0][1]}"
    elif parts:
        first = f"cost: ${cost.usd:.4f} = " + " + ".join(f"${usd:.4f} {label}" for usd, label in parts)
    else:
        first = f"cost: ${cost.usd:.4f}" + ("" if cost.unpriced_instances else " (no instance ran)")
    lines = [first]
    if cost.unpriced_instances:
        lines.append(
            f"{_plural(cost.unpriced_instances, 'instance')} ran at a price spotrun does not know "
            "(no figure for its region): not in the cost"
        )
    if cost.spot_at_on_demand_usd is not None and cost.savings_pct is not None:
        compared = cost.spot_instances - cost.spot_not_compared
        lines.append(
            f"spot saved {cost.savings_pct:.1f} %: the same {_plural(compared, 'spot instance')} would have cost "
            f"${cost.spot_at_on_demand_usd:.4f} on demand ({cost.on_demand_source})"
        )
    if cost.spot_not_compared:
        lines.append(
            f"saving unknown for {_plural(cost.spot_not_compared, 'spot instance')}: no on-demand price "
            "for its type in its region"
        )
    return lines


def limits_text(job: Job) -> Text:
    """``limits: spent $0.0035 of budget $0.0040; trained 52 s of 30 min`` (what the job used of its limits)."""
    assert job.limits is not None
    used = job.limits
    budget = (
        f"spent ${used.spent_usd:.4f} of budget ${used.max_usd:g}"
        if used.max_usd is not None
        else "no budget"
    )
    runtime = f"trained {used.training_seconds:.0f} s of {used.max_runtime_seconds / 60:g} min"
    hit = job.error is not None and job.error.type in {"Budget.Exceeded", "Training.MaxRuntimeExceeded"}
    return Text(f"limits: {budget}; {runtime}", style="bold red" if hit else "bold")


def capacity_wait_text(job: Job, now: datetime) -> Text | None:
    """``waiting for capacity since 17:02 UTC (12 min): SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a; ...``.

    For a job that ended during its wait: ``waited for capacity from 17:02 UTC (60 min): ...``, up to its end.
    None for a job that does not wait.
    """
    wait = job.capacity_wait
    if wait is None:
        return None
    ended = job.status.is_terminal
    line = wait_line(wait, job.updated_at if ended else now, ended=ended)
    return Text(line, style="bold red" if ended else "bold yellow")


def final_summary(job: Job, now: datetime) -> Group:
    """Everything a user wants to see when a job has ended."""
    parts: list[Any] = [timeline_table(job, now)]
    if job.attempts:
        parts.append(attempts_table(job))
    nodes = nodes_table(job)
    if nodes is not None:
        parts.append(nodes)
    lost = work_lost(job)
    if lost.interruptions:
        parts.append(work_lost_text(lost))
    failed_saves = save_failures_text(job)
    if failed_saves is not None:
        parts.append(failed_saves)
    if job.cost is not None:
        lines = cost_lines(job.cost) + ([price_sources_line(job)] if job.billed_instances() else [])
        parts.append(Text("\n".join(lines), style="bold"))
    if job.limits is not None:
        parts.append(limits_text(job))
    if job.archive:
        archive = Table(title="archived model", title_justify="left")
        archive.add_column("object")
        archive.add_column("storage class")
        archive.add_column("bytes", justify="right")
        for item in job.archive:
            archive.add_row(item.uri, item.storage_class, str(item.size))
        total = job.archive_total
        if total is not None and total.objects > len(job.archive):
            more = total.objects - len(job.archive)
            archive.add_row(f"... and {more} more (listed in {total.metadata_uri})", "", str(total.bytes))
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
    waiting = capacity_wait_text(job, now)
    if waiting is not None:
        parts.append(waiting)
    parts.append(Text.assemble("status: ", status_text(job.status, job.error.type if job.error else None)))
    return Group(*parts)
