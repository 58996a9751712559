"""The manifest's ``training.setup``: the job's own environment, made on each new instance before training.

The ``stage`` step runs these commands once it has put the code and data in place. Stage runs once per
instance, so a command restarted on the same instance (``restarts_on_error``) finds the environment made, and a
replacement instance makes it again. Each command's output goes to the attempt's log after a header line, where
the training command's output follows: ``spotrun logs`` shows both. The environment itself is never written to
the log (``training.env`` may hold secrets).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from spotrun.agent.links import open_append
from spotrun.agent.supervision.log_notes import write_note
from spotrun.agent.supervision.supervisor import COMMAND_NOT_FOUND, KILL_GRACE_SECONDS, describe_exit
from spotrun.model.contract_variables import expand_argv


@dataclass(frozen=True)
class SetupFailure:
    """How the setup command that ended the setup failed.

    Attributes
    ----------
    message
        Which command (its position and argv), how it ended, and after how long.
    exit_code
        Its exit status; :data:`~spotrun.agent.supervision.supervisor.COMMAND_NOT_FOUND` when it could not be
        started; None when it was stopped at the time limit.
    seconds
        Seconds the setup ran, all commands so far together.
    """

    message: str
    exit_code: int | None
    seconds: float


class SetupFailedError(RuntimeError):
    """A setup command failed: the job ends ``Setup.Failed``."""

    def __init__(self, failure: SetupFailure):
        super().__init__(failure.message)
        self.failure = failure


class SetupOverBudgetError(SetupFailedError):
    """The job's budget ran out during setup: the job ends ``Budget.Exceeded``, as in training."""


class SetupAbandonedError(RuntimeError):
    """The workflow stopped waiting for the stage step while setup ran: nothing is reported."""


def run_setup(
    commands: Sequence[Sequence[str]],
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    *,
    timeout_seconds: float,
    budget_seconds: float | None = None,
    abandoned: Callable[[], bool] = lambda: False,
    tick_seconds: float = 0.2,
) -> float:
    """Run each setup command in turn, its output appended to ``log_path``, within one time limit for all.

    Parameters
    ----------
    commands
        The argv lists, in order; none runs through a shell.
    cwd
        Their working directory (the job's code directory).
    env
        Their complete environment (the training command's).
    log_path
        The attempt's log; every command's output follows a ``--- spotrun: setup i/n: [argv]`` line.
    timeout_seconds
        For all commands together; then the one running is stopped (its process group: SIGTERM, then SIGKILL).
    budget_seconds
        Seconds until the job's budget runs out (the command's ``stop_at``), None without a budget; then the
        command running is stopped likewise.
    abandoned
        Returns True once the workflow no longer waits for the step; the command running is then stopped.
    tick_seconds
        How often ``abandoned`` and the time limit are checked while a command runs.

    Returns
    -------
    float
        Seconds all the commands took.

    Raises
    ------
    SetupFailedError
        When a command exits non-zero, cannot be started, or the time limit runs out.
    SetupOverBudgetError
        When the budget runs out first.
    SetupAbandonedError
        When the workflow stopped waiting.
    """
    started = time.monotonic()
    # The budget, when it runs out first, is what stops setup (and what the job ends with).
    over_budget = budget_seconds is not None and budget_seconds < timeout_seconds
    deadline = started + (budget_seconds if budget_seconds is not None and over_budget else timeout_seconds)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # The job's commands can write the log directory: a link left there is refused, never written through.
    with open_append(log_path) as log:
        for index, argv in enumerate(commands, start=1):
            where = f"setup command {index} of {len(commands)} {list(argv)}"
            _note(log, f"setup {index}/{len(commands)}: {list(argv)}")
            # Expanded like the training command; the log shows the argv as written (training.env may hold secrets).
            code, timed_out = _run_one(
                expand_argv(argv, env), cwd, env, log, deadline, abandoned, tick_seconds
            )
            seconds = time.monotonic() - started
            if timed_out and over_budget:
                message = f"{where} was stopped: the job's budget.max_usd would be passed"
                _note(log, message)
                raise SetupOverBudgetError(SetupFailure(message, None, round(seconds, 3)))
            if timed_out:
                minutes = timeout_seconds / 60
                message = f"{where} was stopped: setup ran past setup_timeout_minutes ({minutes:g} min)"
                _note(log, message)
                raise SetupFailedError(SetupFailure(message, None, round(seconds, 3)))
            if code != 0:
                how = (
                    "could not be started" if code == COMMAND_NOT_FOUND else f"failed ({describe_exit(code)})"
                )
                message = f"{where} {how} after {seconds:.1f} s"
                _note(log, message)
                raise SetupFailedError(SetupFailure(message, code, round(seconds, 3)))
        seconds = time.monotonic() - started
        _note(log, f"setup done in {seconds:.1f} s")
    return round(seconds, 3)


def _run_one(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    log: IO[bytes],
    deadline: float,
    abandoned: Callable[[], bool],
    tick_seconds: float,
) -> tuple[int | None, bool]:
    """Run one command; return its exit status (127: not started) and whether the time limit stopped it."""
    try:
        child = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own process group: stopping it reaches whatever it started (pip's build backends, say).
            start_new_session=True,
        )
    except OSError as exc:
        _note(log, f"cannot start the command: {exc}")
        return COMMAND_NOT_FOUND, False
    try:
        while True:
            try:
                return child.wait(timeout=tick_seconds), False
            except subprocess.TimeoutExpired:
                pass
            if abandoned():
                _note(log, "the workflow no longer waits for this task; stopping setup")
                _stop(child)
                raise SetupAbandonedError("the workflow abandoned the stage step during setup")
            if time.monotonic() >= deadline:
                _stop(child)
                return child.returncode, True
    finally:
        # Whatever it left running in its group must not outlive setup.
        _signal_group(child.pid, signal.SIGKILL)


def _stop(child: subprocess.Popen[bytes]) -> None:
    _signal_group(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(child.pid, signal.SIGKILL)
        child.wait()


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _note(log: IO[bytes], line: str) -> None:
    # The supervisor's marker, so the log reads as one story: setup's lines, then the training runs'.
    write_note(log, line)
