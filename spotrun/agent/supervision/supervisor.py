"""Runs the training command and watches it: restarts, time and budget limits, interruption notices, abandonment.

Signals go the way systemd's ``KillMode=mixed`` sends them
(https://www.freedesktop.org/software/systemd/man/latest/systemd.kill.html): the checkpoint signal (and the
abandonment's SIGTERM) to the command's leader only, the process the agent started; SIGKILL to its whole process
group once the grace is over or the leader has exited. The leader is the one that saves: a training script, or
``torchrun``, which forwards the signal to its ranks itself. Sent to the group, the signal also reached the
script's DataLoader workers, which die of it (their default action), and the script then crashed in the middle
of its save (``DataLoader worker ... is killed by signal: Terminated``). A shell wrapper must therefore ``exec``
the trainer, or forward the signal, as under any process manager that signals the main process.

The supervisor owns only the child process. What runs beside it (heartbeats, checkpoint uploads, IMDS polling)
are threads started by :mod:`spotrun.agent.steps.train`; the supervisor learns about them through two callables it
polls, whether training is hung from a :class:`~spotrun.agent.supervision.hang.HangWatch`, which reads the
command's progress file, and whether its GPUs idle from an :class:`~spotrun.agent.supervision.idle.IdleWatch`,
which the GPU samples feed, so each concern stays testable on its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from spotrun.agent.links import open_append
from spotrun.agent.supervision.hang import HangWatch
from spotrun.agent.supervision.idle import IdleWatch
from spotrun.agent.supervision.log_notes import write_note
from spotrun.agent.supervision.spot_notices import Notice

logger = logging.getLogger(__name__)

OutcomeKind = Literal[
    "completed", "failed", "timed_out", "budget_exceeded", "interrupted", "abandoned", "hung", "idle"
]

KILL_GRACE_SECONDS = 10.0
# Without a known termination time (the agent itself was told to stop), the child gets this long to save.
DEFAULT_INTERRUPTION_GRACE_SECONDS = 60.0
# Share of the time left before termination the child gets to save; the rest is for the upload.
INTERRUPTION_GRACE_SHARE = 0.6
COMMAND_NOT_FOUND = 127


@dataclass(frozen=True)
class TrainOutcome:
    """How supervision ended."""

    kind: OutcomeKind
    exit_code: int | None
    runs: int
    seconds: float
    message: str
    notice: Notice | None = None


def interruption_grace(notice: Notice, default: float = DEFAULT_INTERRUPTION_GRACE_SECONDS) -> float:
    """Seconds the child gets to checkpoint and exit after an interruption notice.

    Parameters
    ----------
    notice
        The interruption notice.
    default
        Used when the notice carries no time.

    Returns
    -------
    float
        :data:`INTERRUPTION_GRACE_SHARE` of the time left, at least one second.
    """
    left = notice.seconds_left()
    if left is None:
        return default
    return max(1.0, left * INTERRUPTION_GRACE_SHARE)


def describe_exit(code: int | None) -> str:
    """``"exit code 3"``, or ``"killed by SIGKILL"`` for a negative Popen return code."""
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class TrainingSupervisor:
    r"""Run an argv in its own process group, restarting it on error, within a time limit.

    Parameters
    ----------
    argv
        The command; never run through a shell.
    cwd
        Its working directory.
    env
        Its complete environment.
    log_path
        Its stdout and stderr go here; every run appends, after a separator line.
    restarts
        Runs after the first one when the command exits non-zero.
    max_runtime_seconds
        For all runs together; then the command gets the checkpoint signal and ``stop_grace_seconds`` to save
        and exit, as on an interruption notice.
    checkpoint_signal
        Sent to the command's leader (not its group) on an interruption notice or when a limit runs out.
    interruption
        Returns the interruption notice once there is one.
    abandoned
        Returns True once the workflow no longer waits for the task.
    tick_seconds
        How often those two are checked while the child runs.
    kill_grace_seconds
        Between SIGTERM (to the leader) and SIGKILL (to the group) when the command is stopped for abandonment.
    budget_seconds
        Seconds from the start until the job's budget runs out (None: no budget); then the command is stopped
        like at ``max_runtime_seconds``, and the outcome is ``budget_exceeded``.
    stop_grace_seconds
        How long the command may take to save and exit after the checkpoint signal when a limit runs out.
    hang
        Tells when the command's steps stopped advancing (None: never); told when each run starts. A hung command
        is stopped like at ``max_runtime_seconds``, and the outcome is ``hung``.
    idle
        Tells when the node's GPUs idled (None: never); told when each run starts. An idle command is stopped
        like a hung one, and the outcome is ``idle``.
    shown_argv
        The command as the log shows it (``argv`` when None): the manifest's, before its ``${NAME}``\ s were
        expanded, so that no value of ``training.env`` reaches the log.
    """

    def __init__(
        self,
        argv: list[str],
        cwd: Path,
        env: Mapping[str, str],
        log_path: Path,
        *,
        restarts: int,
        max_runtime_seconds: float,
        checkpoint_signal: signal.Signals,
        interruption: Callable[[], Notice | None] = lambda: None,
        abandoned: Callable[[], bool] = lambda: False,
        tick_seconds: float = 0.2,
        kill_grace_seconds: float = KILL_GRACE_SECONDS,
        budget_seconds: float | None = None,
        stop_grace_seconds: float = DEFAULT_INTERRUPTION_GRACE_SECONDS,
        hang: HangWatch | None = None,
        idle: IdleWatch | None = None,
        shown_argv: list[str] | None = None,
    ):
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env)
        self.log_path = log_path
        self.restarts = restarts
        self.max_runtime_seconds = max_runtime_seconds
        self.checkpoint_signal = checkpoint_signal
        self.interruption = interruption
        self.abandoned = abandoned
        self.tick_seconds = tick_seconds
        self.kill_grace_seconds = kill_grace_seconds
        self.budget_seconds = budget_seconds
        self.stop_grace_seconds = stop_grace_seconds
        self.hang = hang
        self.idle = idle
        self.shown_argv = list(argv if shown_argv is None else shown_argv)

    def run(self) -> TrainOutcome:
        """Run the command until it succeeds, fails for good, runs out of time, or is interrupted."""
        started = time.monotonic()
        deadline = started + self.max_runtime_seconds
        budget_deadline = None if self.budget_seconds is None else started + self.budget_seconds
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The training command can write the log directory: a link left there by an earlier run is refused.
        with open_append(self.log_path) as log:
            run = 0
            while True:
                run += 1
                self._note(log, f"run {run} of at most {self.restarts + 1}: {self.shown_argv}")
                if self.hang is not None:
                    # A restarted command sets up again before its first step: that is not a hang.
                    self.hang.command_started()
                if self.idle is not None:
                    self.idle.command_started()
                try:
                    child = subprocess.Popen(
                        self.argv,
                        cwd=self.cwd,
                        env=self.env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        # Its own process group, so that the final SIGKILL reaches every process it starts.
                        start_new_session=True,
                    )
                except OSError as exc:
                    self._note(log, f"cannot start the command: {exc}")
                    code: int | None = COMMAND_NOT_FOUND
                else:
                    stopped = self._watch(child, deadline, budget_deadline, log)
                    # Whatever it left behind (data loader workers, say) must not hold the GPU any longer.
                    _signal_group(child.pid, signal.SIGKILL)
                    if stopped is not None:
                        kind, message, notice = stopped
                        return TrainOutcome(
                            kind, child.returncode, run, time.monotonic() - started, message, notice
                        )
                    code = child.returncode
                self._note(log, f"the command ended: {describe_exit(code)}")
                seconds = time.monotonic() - started
                if code == 0:
                    return TrainOutcome("completed", 0, run, seconds, "the command exited 0")
                notice = self.interruption()
                if notice is not None:  # it died on its own after the notice: still an interruption
                    return TrainOutcome("interrupted", code, run, seconds, notice.describe(), notice)
                if run > self.restarts:
                    message = f"the command failed ({describe_exit(code)}) after {run} run(s)"
                    return TrainOutcome("failed", code, run, seconds, message)
                logger.warning(
                    "training command failed (%s); restarting (%d left)",
                    describe_exit(code),
                    self.restarts - run + 1,
                )

    def _watch(
        self, child: subprocess.Popen[bytes], deadline: float, budget_deadline: float | None, log: IO[bytes]
    ) -> tuple[OutcomeKind, str, Notice | None] | None:
        """Wait for the child; return None when it exited by itself, else why it was stopped."""
        while True:
            try:
                child.wait(timeout=self.tick_seconds)
            except subprocess.TimeoutExpired:
                pass
            else:
                return None
            notice = self.interruption()
            if notice is not None:
                self._stop_for_interruption(child, notice, log)
                return "interrupted", notice.describe(), notice
            if self.abandoned():
                self._note(log, "the workflow no longer waits for this task; stopping the command")
                self._terminate(child)
                return "abandoned", "the workflow abandoned the task", None
            if budget_deadline is not None and time.monotonic() >= budget_deadline:
                message = "the job's budget.max_usd would be passed: the command was stopped to checkpoint"
                self._stop_for_limit(child, message, log)
                return "budget_exceeded", message, None
            if time.monotonic() >= deadline:
                minutes = self.max_runtime_seconds / 60
                message = (
                    f"the job used up its max_runtime_minutes (this attempt's {minutes:g} min remaining): "
                    "the command was stopped to checkpoint"
                )
                self._stop_for_limit(child, message, log)
                return "timed_out", message, None
            verdict = None if self.hang is None else self.hang.hung()
            if verdict is not None:
                # Its ranks may be stuck in a collective and never save: the grace ends it all the same.
                message = verdict.describe()
                self._stop_for_limit(child, message, log)
                return "hung", message, None
            idled = None if self.idle is None else self.idle.idle()
            if idled is not None:
                # The same stop as a hang: the checkpoint signal, so a relaunch resumes the work done so far.
                message = idled.describe()
                self._stop_for_limit(child, message, log)
                return "idle", message, None

    def _stop_for_limit(self, child: subprocess.Popen[bytes], message: str, log: IO[bytes]) -> None:
        # A limit is not an error of the script: it gets the checkpoint signal, as on a warning, so the work
        # done so far is committed and a resumed job continues from it.
        self._checkpoint_and_stop(child, message, self.stop_grace_seconds, log)

    def _stop_for_interruption(self, child: subprocess.Popen[bytes], notice: Notice, log: IO[bytes]) -> None:
        self._checkpoint_and_stop(child, notice.describe(), interruption_grace(notice), log)

    def _checkpoint_and_stop(
        self, child: subprocess.Popen[bytes], reason: str, grace: float, log: IO[bytes]
    ) -> None:
        """Send the checkpoint signal to the leader; kill the group if it has not exited ``grace`` seconds later."""
        self._note(log, f"{reason}: sending {self.checkpoint_signal.name}, waiting up to {grace:.0f} s")
        # The leader only: its DataLoader workers must live until it has saved (the module's docstring).
        child.send_signal(self.checkpoint_signal)
        try:
            child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._note(log, "the command did not exit in time after the checkpoint signal; killing it")
            _signal_group(child.pid, signal.SIGKILL)
            child.wait()

    def _terminate(self, child: subprocess.Popen[bytes]) -> None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=self.kill_grace_seconds)
        except subprocess.TimeoutExpired:
            _signal_group(child.pid, signal.SIGKILL)
            child.wait()

    @staticmethod
    def _note(log: IO[bytes], line: str) -> None:
        write_note(log, line)


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
