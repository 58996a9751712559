"""Following a job live: ``spotrun submit`` on a terminal, ``spotrun attach [ID]``, ``submit --wait``.

The view polls the job and prints, one line each with its time, what happened since the last poll: its state
changes, each attempt's start, EC2's rebalance recommendation and interruption warning, each attempt's end (the
steps it lost). Below them, redrawn in place on a terminal, the log tail and where the job stands (its step and
its cost so far), with each node's GPUs (utilization, memory flagged above 90 %) and the latest training
metrics. The events are computed by plain functions over two successive job views (:func:`job_events`),
the log tail comes from one place (:class:`LogTail`); Ctrl-C detaches (the job keeps running) and says how
to come back.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from spotrun.cli.api import as_job
from spotrun.cli.client import ApiError, SpotrunClient
from spotrun.cli.display.gpu_health import TelemetryPoll
from spotrun.cli.display.gpu_health_render import live_parts
from spotrun.cli.display.output import console, emit_json, error_console, fail, json_requested
from spotrun.cli.display.summary import progress_text, status_text
from spotrun.cli.logs import LogFollower, LogLine
from spotrun.model.job.attempt import INTERRUPTION_REASONS
from spotrun.model.job.record import JobStatus, utc_now

TAIL_LINES = 10  # log lines shown under the events
DETACHED_EXIT = 130  # what a shell reports for Ctrl-C: the job has not ended, so no code of its ending


def on_terminal() -> bool:
    """Whether stdout is a terminal: ``submit`` then follows the job, else prints its id and returns.

    Tests replace this function to stand for a terminal.
    """
    return sys.stdout.isatty()


def should_follow(*, wait: bool, detach: bool, as_json: bool) -> bool:
    """Whether ``submit`` follows the job: with --wait always; else on a terminal, unless --detach or --json
    (whose stdout is one JSON object, never a live view)."""
    return wait or (not detach and not as_json and on_terminal())


def pause(seconds: float) -> None:
    """Wait between two polls (tests replace it to move the job along instead)."""
    time.sleep(seconds)


@dataclass(frozen=True)
class Event:
    """One thing that happened to a job, printed as one line: ``12:04:31  TRAINING``."""

    at: datetime
    text: str
    style: str = ""

    def line(self) -> Text:
        """The event as printed: its UTC time, then what happened."""
        return Text.assemble((self.at.strftime("%H:%M:%S") + "  ", "dim"), (self.text, self.style))


def _at(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _price(attempt: dict[str, Any]) -> str:
    price = attempt.get("price_per_hour")
    return "at an unknown price" if price is None else f"at ${price:.4f}/h"


def resumed_at(attempt: dict[str, Any] | None, timeline: list[dict[str, Any]]) -> datetime | None:
    """When ``attempt`` resumed from a committed checkpoint; None: it has not (yet).

    The agent restores only a committed checkpoint (its commit marker in S3), while staging; the record learns it
    (``checkpoint_restored``, the checkpoint's prefix, and ``restored_step``) in the same write that moves the job
    to TRAINING on that attempt's instance. So that change's time is when the attempt resumed: its own start is
    earlier, and may even precede the checkpoint's commit (a replacement boots while the old instance saves).
    """
    if attempt is None or attempt.get("checkpoint_restored") is None or attempt.get("restored_step") is None:
        return None
    started = datetime.fromisoformat(attempt["started_at"])
    for change in timeline:
        at = datetime.fromisoformat(change["at"])
        detail = str(change.get("detail") or "")  # the instance id, then maybe how long setup took
        if (
            change["status"] == JobStatus.TRAINING.value
            and at >= started
            and detail.startswith(attempt["instance_id"])
        ):
            return at
    return None


def _where(attempt: dict[str, Any]) -> str:
    # "g5.xlarge", or "2 x g5.xlarge" for a group.
    nodes = attempt.get("nodes") or []
    return f"{len(nodes)} x {attempt['instance_type']}" if nodes else str(attempt["instance_type"])


def _instances(attempt: dict[str, Any]) -> str:
    # "i-0abc", or "i-0abc kept, i-0def new" for a group.
    nodes = attempt.get("nodes") or []
    if not nodes:
        return str(attempt["instance_id"])
    return ", ".join(f"{n['instance_id']} {'kept' if n.get('kept_from') else 'new'}" for n in nodes)


def _attempt_events(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    timelines: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> list[Event]:
    """What changed in one attempt between two views (``old`` None: the attempt is new), given the job's timeline
    in each view."""
    number = new["number"]
    previous = old or {}
    events = []
    if old is None:
        text = (
            f"attempt {number}: {_where(new)} in {new['availability_zone']}, {new['lifecycle']} "
            f"{_price(new)} ({_instances(new)})"
        )
        events.append(Event(datetime.fromisoformat(new["started_at"]), text, "bold"))
    if (at := resumed_at(new, timelines[1])) and resumed_at(old, timelines[0]) is None:
        text = f"attempt {number}: resumes from the checkpoint of step {new['restored_step']}"
        events.append(Event(at, text, "green"))
    if (at := _at(new.get("rebalance_at"))) and not previous.get("rebalance_at"):
        events.append(
            Event(at, f"attempt {number}: EC2 recommends a rebalance (spot capacity at risk)", "yellow")
        )
    if (at := _at(new.get("notice_at"))) and not previous.get("notice_at"):
        if new.get("deadline_move"):
            where = "back to spot" if new.get("lifecycle") == "on-demand" else "to on-demand"
            text = f"attempt {number}: the deadline policy moves the job {where}; checkpointing"
        else:
            warned = [n["instance_id"] for n in new.get("nodes") or [] if n.get("notice_at")]
            whom = ", ".join(warned) or new["instance_id"]
            every = "; every node checkpoints" if new.get("nodes") else "; checkpointing"
            text = f"attempt {number}: spot interruption warning for {whom}{every}"
        events.append(Event(at, text, "bold yellow"))
    if (at := _at(new.get("ended_at"))) and not previous.get("ended_at"):
        reason = new.get("end_reason") or "ended"
        lost = new.get("steps_lost")
        text = f"attempt {number} ended: {reason}" + ("" if lost is None else f", {lost} steps lost")
        events.append(Event(at, text, "yellow" if reason in INTERRUPTION_REASONS else ""))
    return events


def job_events(before: dict[str, Any] | None, after: dict[str, Any]) -> list[Event]:
    """What happened to a job between two of its views, oldest first.

    Parameters
    ----------
    before
        The previous view (``GET /jobs/{id}``); None: everything in ``after`` is new (the job's history so far).
    after
        The view just read.

    Returns
    -------
    list[Event]
        The new state changes (with their detail), each new attempt, the committed checkpoint it resumes from
        (when it starts training: :func:`resumed_at`), a rebalance recommendation, an interruption warning, an
        attempt's end (and the steps it lost).
    """
    seen = len(before["timeline"]) if before else 0
    events = []
    for change in after.get("timeline", [])[seen:]:
        status = JobStatus(change["status"])
        text = status.value + (f": {change['detail']}" if change.get("detail") else "")
        events.append(Event(datetime.fromisoformat(change["at"]), text, str(status_text(status).style)))
    earlier = {a["number"]: a for a in (before or {}).get("attempts", [])}
    timelines = ((before or {}).get("timeline", []), after.get("timeline", []))
    for attempt in after.get("attempts", []):
        events += _attempt_events(earlier.get(attempt["number"]), attempt, timelines)
    return sorted(events, key=lambda event: event.at)  # stable: an attempt's own events keep their order


def status_line(view: dict[str, Any]) -> Text:
    """Where the job stands, redrawn at each poll: ``job X: TRAINING on g4dn.xlarge (spot)`` and its progress."""
    line = Text.assemble(f"job {view['job_id']}: ", status_text(JobStatus(view["status"])))
    attempts = view.get("attempts") or []
    if attempts and not attempts[-1].get("ended_at"):
        line.append(f" on {attempts[-1]['instance_type']} ({attempts[-1]['lifecycle']})")
    if view.get("progress"):
        line.append("\n").append_text(progress_text(view["progress"], utc_now()))
    return line


class LogTail:
    """The last ``lines`` lines of the job's training log, over its attempts (the newest last), kept current.

    The one place the view reads the log: the first :meth:`poll` reads each attempt's tail, later ones only what
    was written since (the logs cursor of :class:`spotrun.cli.logs.LogFollower`), from the attempts' live
    streams. A log that cannot be read now leaves the tail as it was, never ends the view.
    """

    def __init__(self, client: SpotrunClient, job_id: str, lines: int = TAIL_LINES):
        self._follower = LogFollower(client, job_id, tail=lines)
        self._lines: deque[str] = deque(maxlen=lines)

    def poll(self) -> list[str]:
        """The tail, after reading what is new."""
        try:
            items = self._follower.poll()
        except ApiError:
            return list(self._lines)
        self._lines.extend(item.text for item in items if isinstance(item, LogLine))
        return list(self._lines)


def log_tail(client: SpotrunClient, job_id: str, lines: int = TAIL_LINES) -> list[str]:
    """The job's log tail once (:class:`LogTail`'s first poll)."""
    return LogTail(client, job_id, lines).poll()


def live_view(view: dict[str, Any], tail: list[str], health: list[Text] | None = None) -> Group:
    """What is redrawn in place under the events: the log tail, the GPU health and latest metrics
    (:func:`spotrun.cli.display.gpu_health_render.live_parts`), then :func:`status_line`."""
    parts: list[Any] = []
    if tail:
        parts.append(Text("--- log tail ---", style="dim"))
        parts += [Text(line, style="dim") for line in tail]
    parts += health or []
    parts.append(status_line(view))
    return Group(*parts)


def follow(client: SpotrunClient, job_id: str, out: Console, poll: float) -> dict[str, Any]:
    """Follow the job until it ends: its events printed on ``out``, the live view under them.

    Returns
    -------
    dict
        The ended job's view. Ctrl-C (KeyboardInterrupt) goes through to the caller, the job untouched.
    """
    before: dict[str, Any] | None = None
    view = client.get_job(job_id)
    tail = LogTail(client, job_id)
    telemetry = TelemetryPoll(client, job_id)
    with Live(live_view(view, []), console=out, transient=True, auto_refresh=False) as live:
        while True:
            for event in job_events(before, view):
                live.console.print(event.line())
            if JobStatus(view["status"]).is_terminal:
                return view
            health = live_parts(as_job(view), telemetry.poll())
            live.update(live_view(view, tail.poll(), health), refresh=True)
            pause(poll)
            before, view = view, client.get_job(job_id)


def follow_or_detach(client: SpotrunClient, job_id: str, out: Console, poll: float) -> dict[str, Any]:
    """:func:`follow`; Ctrl-C detaches: the job keeps running, the way back is printed, the exit code is 130.

    Raises
    ------
    typer.Exit
        On Ctrl-C (under ``--json`` the hint is also the one JSON object on stdout, as an error).
    """
    try:
        return follow(client, job_id, out, poll)
    except KeyboardInterrupt:
        hint = (
            f"detached from job {job_id}; it keeps running. Re-attach: `spotrun attach {job_id}`; "
            f"its log: `spotrun logs {job_id} --follow`; stop it: `spotrun cancel {job_id}`"
        )
        raise _detached(hint) from None


def _detached(hint: str) -> typer.Exit:
    if json_requested():
        return fail(hint, code=DETACHED_EXIT)
    error_console().print(Text(hint, style="yellow"))
    return typer.Exit(code=DETACHED_EXIT)


def ended_note(view: dict[str, Any], file: str) -> str:
    """What re-submitting the manifest of an ended job says: nothing new started, and how to run it again."""
    ended = view["timeline"][-1]["at"] if view.get("timeline") else view["updated_at"]
    when = datetime.fromisoformat(ended).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"job {view['job_id']} already ran this manifest: it ended {view['status']} at {when}; nothing new "
        f"was started (`spotrun status {view['job_id']}` shows it). To run it again: "
        f"`spotrun submit {file} --idempotency-key NEW-KEY`, or change the manifest."
    )


def after_submit(
    client: SpotrunClient,
    accepted: dict[str, Any],
    file: Path,
    *,
    wait: bool,
    detach: bool,
    as_json: bool,
    poll: float,
) -> dict[str, Any] | None:
    """What ``submit`` does once the API answered ``accepted`` (``POST /jobs``).

    A duplicate of an ended job runs nothing: :func:`ended_note` says so. Otherwise the job is followed when
    :func:`should_follow`, else its id is printed.

    Returns
    -------
    dict or None
        The ended job's view, to summarise (with --wait, the ended duplicate's too); None: the answer was
        printed and the command is done.
    """
    job_id, duplicate = accepted["job_id"], accepted["outcome"] == "duplicate"
    out = console(stderr=as_json, soft_wrap=True)
    view = client.get_job(job_id) if duplicate else None
    if view is not None and JobStatus(view["status"]).is_terminal:
        out.print(ended_note(view, str(file)), style="yellow")
        if wait:
            return view
        if as_json:
            emit_json(accepted)
        return None
    if should_follow(wait=wait, detach=detach, as_json=as_json):
        if duplicate:
            out.print(f"job {job_id} was already submitted (nothing new started): following it")
        else:
            # The id first, before the first poll (rich flushes each print, so a pipe's reader has it at once):
            # off a terminal the live view draws nothing until the end, and whoever reads the output may need the
            # id (to attach, cancel, or read the logs) long before the job ends.
            out.print(f"job {job_id} {accepted['outcome']}", markup=False)
        # Its own console: the live part wraps within the terminal's width, so that each redraw erases the last.
        return follow_or_detach(client, job_id, console(stderr=as_json), poll)
    if as_json:
        emit_json(accepted)
    elif view is not None:
        typer.echo(f"job {job_id} duplicate: already submitted, {view['status']} now")
    else:
        typer.echo(f"job {job_id} {accepted['outcome']}")
    return None
