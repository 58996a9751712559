"""``spotrun logs [ID] [--follow]``: a job's training logs, read live while it runs, across its attempts.

:class:`LogFollower` is the reusable part: given a client and a job, each :meth:`LogFollower.poll` answers the
lines written since the last one (the first answers each attempt's tail), through the API's cursor
(``GET /jobs/{id}/logs?next_token=``), with a header where another attempt's lines begin;
:meth:`LogFollower.render` makes them printable lines. ``--follow`` polls it until the job ends and exits with the
job's exit code (:func:`spotrun.model.job.limits.exit_code`); Ctrl-C stops it quietly with 130, the shell's code
for an interrupt (typer's handling of ``KeyboardInterrupt``). ``--follow --json`` is refused: ``--json`` prints
one object, and a stream is not one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from spotrun.cli.client import SpotrunClient
from spotrun.cli.display.output import JsonOpt, emit_json, fail
from spotrun.cli.target import DEFAULT_TARGET, ApiTarget, api_client
from spotrun.model.job.limits import exit_code
from spotrun.model.job.record import JobStatus

DEFAULT_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class LogLine:
    """One line of a job's training log, and the attempt that wrote it."""

    attempt: int
    text: str


@dataclass(frozen=True)
class AttemptHeader:
    """Where an attempt's lines begin: its number, where they are read from, whether earlier ones were left out."""

    attempt: int
    where: str
    truncated: bool


def describe_entry(entry: dict[str, Any]) -> AttemptHeader:
    """The header of one attempt of a ``GET /jobs/{id}/logs`` answer."""
    source = entry.get("source", "s3")
    if source == "live":
        where = f"{entry['stream']} (live)"
    elif source == "s3":
        where = entry["key"]
    else:
        where = f"{entry['key']} (no log yet)"
    return AttemptHeader(entry["attempt"], where, bool(entry["truncated"]))


def header_text(header: AttemptHeader) -> str:
    """``== attempt 2: <where>``, and a note when earlier lines were left out."""
    more = ", earlier lines left out" if header.truncated else ""
    return f"== attempt {header.attempt}: {header.where}{more}"


class LogFollower:
    """Reads a job's log lines as they are written: the tail first, then only what came since.

    Parameters
    ----------
    client
        The API client.
    job_id
        The job.
    attempt
        Only this attempt; None: every attempt, moving on to each new one.
    tail
        Lines of each attempt's tail in the first :meth:`poll`.
    """

    def __init__(self, client: SpotrunClient, job_id: str, *, attempt: int | None = None, tail: int = 200):
        self.client = client
        self.job_id = job_id
        self.attempt = attempt
        self.tail = tail
        self.next_token: str | None = None
        # Each attempt's header is printed once, and once more when an attempt that had no log yet gets one
        # (the follower may start while the first instance still boots).
        self._headed: dict[int, bool] = {}

    def poll(self) -> list[AttemptHeader | LogLine]:
        """What was written since the last call, in order: an attempt's header where its lines begin.

        The first call answers each attempt's last ``tail`` lines; later ones only the new lines, and the
        header of each attempt seen for the first time (a new attempt's, once the job retried), and again
        when an attempt announced with no log yet starts having one.
        """
        if self.next_token is None:
            answer = self.client.logs(self.job_id, attempt=self.attempt, tail=self.tail)
        else:
            answer = self.client.logs(self.job_id, attempt=self.attempt, next_token=self.next_token)
        self.next_token = answer["next_token"]
        found: list[AttemptHeader | LogLine] = []
        for entry in answer["logs"]:
            number = entry["attempt"]
            readable = entry.get("source", "s3") != "none"
            if number not in self._headed or (readable and not self._headed[number]):
                self._headed[number] = readable
                found.append(describe_entry(entry))
            found += [LogLine(number, text) for text in entry["lines"]]
        return found

    @staticmethod
    def render(items: list[AttemptHeader | LogLine]) -> list[str]:
        """What :meth:`poll` answered, as printed lines."""
        return [header_text(item) if isinstance(item, AttemptHeader) else item.text for item in items]


def latest_job_id(client: SpotrunClient) -> str:
    """The most recent job's id (``logs`` and ``status`` without an ID)."""
    newest = client.list_jobs(limit=1)["jobs"]
    if not newest:
        raise fail("no jobs yet")
    return str(newest[0]["job_id"])


def follow(
    client: SpotrunClient,
    follower: LogFollower,
    poll_seconds: float,
    emit: Callable[[str], None] = typer.echo,
) -> int:
    """Print the job's lines as they come until it ends; returns its exit code.

    The job's status is read before each poll, so the poll after it ended prints every line it wrote.

    Parameters
    ----------
    client, follower
        The API client, and the follower of the job's log.
    poll_seconds
        Between two polls.
    emit
        Prints one line (a follow view can draw it elsewhere).
    """
    while True:
        view = client.get_job(follower.job_id)
        for text in follower.render(follower.poll()):
            emit(text)
        if JobStatus(view["status"]).is_terminal:
            return exit_code(view["status"], (view.get("error") or {}).get("type"))
        time.sleep(poll_seconds)


def logs(
    job_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="The job's id. Default: the most recent job.")
    ] = None,
    attempt: Annotated[int | None, typer.Option(min=1, help="Only this attempt.")] = None,
    tail: Annotated[int, typer.Option(min=1, max=5000, help="Lines from the end of each log.")] = 200,
    follow_: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing new lines, across attempts, until the job ends; exit with its exit code.",
        ),
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            min=0.05,
            help=f"Seconds between polls with --follow (default {DEFAULT_POLL_SECONDS:g}).",
            show_default=False,
        ),
    ] = None,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Print each attempt's training log (read live while it runs); --follow streams it until the job ends."""
    if follow_ and as_json:
        raise fail("--follow streams lines and --json prints one object: use one of them", code=2)
    if poll is not None and not follow_:
        raise fail("--poll sets how often --follow reads new lines: give --follow too", code=2)
    with api_client(target) as client:
        job_id = job_id or latest_job_id(client)
        follower = LogFollower(client, job_id, attempt=attempt, tail=tail)
        if not follow_:
            answer = client.logs(job_id, attempt=attempt, tail=tail)
            if as_json:
                emit_json(answer)
                return
            for entry in answer["logs"]:
                typer.echo(header_text(describe_entry(entry)))
                for line in entry["lines"]:
                    typer.echo(line)
            return
        # Ctrl-C: typer ends the command quietly with 130 (128 + SIGINT), the job untouched.
        code = follow(client, follower, DEFAULT_POLL_SECONDS if poll is None else poll)
    if code:
        raise typer.Exit(code=code)
