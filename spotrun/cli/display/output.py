"""How every ``spotrun`` command writes: its consoles, its error line, its ``--json`` answer."""

from __future__ import annotations

import json
import sys
from contextvars import ContextVar
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from typer._click.exceptions import UsageError  # Typer vendors its own click: its errors are these

# Whether the running command was given --json: set by the option itself, whose callback runs on every command
# that has it, given or not (so one process running several commands never sees an earlier one's).
_JSON_ANSWER: ContextVar[bool] = ContextVar("spotrun_json_answer", default=False)


def json_answer(value: bool) -> bool:
    """The ``--json`` option's callback: remember that this command answers in JSON (its errors too)."""
    _JSON_ANSWER.set(bool(value))
    return value


JsonOpt = Annotated[
    bool,
    typer.Option("--json", callback=json_answer, help="Print the answer (or the error) as one JSON object."),
]


def console(stderr: bool = False, *, highlight: bool = False, soft_wrap: bool = False) -> Console:
    """A console on stdout (or stderr) for tables and progress.

    Parameters
    ----------
    stderr
        Write on stderr, e.g. the progress of a command whose stdout is ``--json``.
    highlight
        Let rich colour numbers and strings (the demo's live view).
    soft_wrap
        Never wrap lines (paths and URLs stay whole, to be copied).

    Returns
    -------
    Console
        Wide enough for the tables when the output is a file or a pipe; a terminal keeps its own width.
    """
    out = sys.stderr if stderr else sys.stdout
    return Console(file=out, highlight=highlight, soft_wrap=soft_wrap, width=None if out.isatty() else 120)


def error_console() -> Console:
    """A console on stderr that never wraps: an error's paths and URLs stay whole."""
    return Console(stderr=True, soft_wrap=True)


def json_requested() -> bool:
    """Whether the running command was given ``--json``."""
    return _JSON_ANSWER.get()


def fail(message: object, code: int = 1, errors: list[str] | None = None) -> typer.Exit:
    """Print ``error: message`` (and one line per problem) on stderr, unwrapped; return the exit to raise.

    Under ``--json`` the error is also the command's one JSON object on stdout,
    ``{"error": {"message", "errors", "exit_code"}}``: a script parses stdout whatever happened.

    Parameters
    ----------
    message
        What went wrong.
    code
        The exit code.
    errors
        One line per problem, each naming its field (a manifest's, the API's).

    Returns
    -------
    typer.Exit
        To raise: ``raise fail(...)``.
    """
    lines = list(errors or [])
    error_console().print(
        Text.assemble(("error: ", "red"), str(message), "".join(f"\n  - {line}" for line in lines))
    )
    if json_requested():
        emit_json({"error": {"message": str(message), "errors": lines, "exit_code": code}})
    return typer.Exit(code=code)


def usage_error_json(error: UsageError, argv: list[str]) -> None:
    """Under ``--json`` in ``argv``, answer a usage error (unknown option, missing argument, bad value) as the
    one JSON object on stdout, ``{"error": {"message", "errors", "exit_code": 2}}``; click still prints it on
    stderr and exits 2.

    The option's callback may not have run (the error can come before it is parsed), so ``argv`` is read: the
    ``--json`` of any command, before a ``--`` that ends the options.
    """
    options = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" in options:
        message = error.format_message()
        emit_json({"error": {"message": message, "errors": [], "exit_code": error.exit_code}})


def emit_json(answer: Any) -> None:
    """Print ``answer`` as one line of JSON on stdout, for scripts."""
    typer.echo(json.dumps(answer))


def show(renderable: RenderableType) -> None:
    """Print tables for people on stdout: boxed on a terminal, plain aligned columns otherwise (for grep, awk)."""
    out = console()
    if not out.is_terminal:
        for table in _tables(renderable):
            table.box = None
    out.print(renderable)


def _tables(renderable: RenderableType) -> list[Table]:
    if isinstance(renderable, Table):
        return [renderable]
    if isinstance(renderable, Group):
        return [table for part in renderable.renderables for table in _tables(part)]
    return []
