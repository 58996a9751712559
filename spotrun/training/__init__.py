"""The checkpoint contract, for user training scripts.

spotrun runs a training command with a few ``SPOTRUN_*`` environment variables, restores the latest committed
checkpoint into ``$SPOTRUN_CHECKPOINT_DIR`` before it starts, uploads every checkpoint that appears there,
and sends a signal (``$SPOTRUN_CHECKPOINT_SIGNAL``, SIGTERM by default) meaning "save now and exit" when the
spot instance is about to be reclaimed. This module wraps that in a few lines::

    from spotrun import training

    run = training.Run.from_env()
    latest = run.latest_checkpoint()
    step = load_state(latest.path) if latest else 0
    while step < total_steps:
        step = train_one_step(step)
        if run.checkpoint_due(step) or run.stop_requested:  # checkpoint_due also reports the step reached
            run.save_checkpoint(step, lambda directory: save_state(directory))
            if run.stop_requested:
                run.exit_for_preemption()
    run.save_model(lambda path: save_model(path))

Under spotrun, :meth:`Run.report_step` (which :meth:`Run.checkpoint_due` calls) tells the agent the latest step
reached, through a small file (``$SPOTRUN_PROGRESS_FILE``), so that the control plane knows how much work an
interruption cost. :meth:`Run.report_metrics` appends training metrics (``loss``, ``accuracy``, any name) to
``$SPOTRUN_METRICS_FILE``, which the agent ships with the job's telemetry.

With the manifest's ``checkpoint.interval_steps: auto``, :meth:`Run.checkpoint_due` is
time-based instead: the agent measures the saves and writes the interval to ``$SPOTRUN_CHECKPOINT_INTERVAL_FILE``
(docs/guides/checkpoint-interval.md).

Every variable the agent sets, and what it means, is listed in :mod:`spotrun.model.contract_variables`.

The same script runs without spotrun: the directories then default to ``./data``, ``./checkpoints`` and
``./output`` (or the arguments given to :meth:`Run.from_env`), and no progress is written.

This module uses the standard library only (with :mod:`spotrun.training.files`, :mod:`spotrun.model.layout` and
:mod:`spotrun.model.contract_variables`, which do too), so that the agent can put it on the training command's
``PYTHONPATH`` whatever interpreter runs the command.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from spotrun.model import layout

# The variable names have their one home in spotrun.model.contract_variables (the manifest's validation needs them too).
from spotrun.model.contract_variables import (
    ENV_ATTEMPT,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_INTERVAL_FILE,
    ENV_CHECKPOINT_INTERVAL_STEPS,
    ENV_CHECKPOINT_SIGNAL,
    ENV_CODE_DIR,
    ENV_DATA_DIR,
    ENV_GPUS_PER_NODE,
    ENV_JOB_ID,
    ENV_METRICS_FILE,
    ENV_MODEL,
    ENV_OUTPUT_DIR,
    ENV_PROGRESS_FILE,
)
from spotrun.training.files import IntervalFile, ProgressFile, replace_path, write_directory
from spotrun.training.metrics import MetricsFile, metrics_record
from spotrun.training.stop_signal import StopSignal, parse_signal


class Checkpoint(NamedTuple):
    """A complete checkpoint directory in the local checkpoint directory."""

    step: int
    path: Path


@dataclass
class Run(StopSignal):
    """One run of a training script under the checkpoint contract.

    Build it with :meth:`from_env`; construct it directly only to give every directory yourself.

    Parameters
    ----------
    data_dir, code_dir, checkpoint_dir, output_dir
        Where the inputs are, where the code is, where checkpoints go, where the model goes.
    checkpoint_interval_steps
        :meth:`checkpoint_due` is true every this many steps (unless ``checkpoint_interval_file`` is set).
    checkpoint_signal
        The signal that means "save a checkpoint now and exit".
    model_name
        Path of the model relative to ``output_dir``, used by :meth:`save_model`.
    job_id, attempt
        The spotrun job and attempt (``None`` and 1 when the script runs on its own).
    keep_local
        Complete checkpoints kept in ``checkpoint_dir``; older ones are deleted after each save. The agent
        keeps the committed copies in S3, so the local directory only needs the newest few.
    progress_file
        Where :meth:`report_step` writes the latest step (``SPOTRUN_PROGRESS_FILE``); None: nowhere.
    gpus_per_node
        GPUs on the instance (``SPOTRUN_GPUS_PER_NODE``); None when the script runs on its own.
    checkpoint_interval_file
        ``checkpoint.interval_steps: auto`` (``SPOTRUN_CHECKPOINT_INTERVAL_FILE``): :meth:`checkpoint_due` is
        then time-based, true once the agent's interval in this file has passed since the last save.
    metrics_file
        Where :meth:`report_metrics` appends (``SPOTRUN_METRICS_FILE``); None: nowhere.
    clock
        Monotonic seconds, for the time-based due and the save's duration (tests inject their own).
    """

    data_dir: Path
    code_dir: Path
    checkpoint_dir: Path
    output_dir: Path
    checkpoint_interval_steps: int = 100
    checkpoint_signal: signal.Signals = signal.SIGTERM
    model_name: str = "model"
    job_id: str | None = None
    attempt: int = 1
    keep_local: int = 3
    progress_file: Path | None = None
    gpus_per_node: int | None = None
    checkpoint_interval_file: Path | None = None
    metrics_file: Path | None = None
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _progress: ProgressFile | None = field(default=None, init=False, repr=False)
    _interval: IntervalFile | None = field(default=None, init=False, repr=False)
    _metrics: MetricsFile | None = field(default=None, init=False, repr=False)
    _stop: bool = field(default=False, init=False, repr=False)
    _previous_handler: Any = field(default=None, init=False, repr=False)
    _handler_installed: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.checkpoint_interval_steps < 1:
            raise ValueError("checkpoint_interval_steps must be at least 1")
        if self.keep_local < 1:
            raise ValueError("keep_local must be at least 1")
        if self.progress_file is not None:
            self._progress = ProgressFile(Path(self.progress_file))
        if self.checkpoint_interval_file is not None:
            self._interval = IntervalFile(Path(self.checkpoint_interval_file), self.clock)
        if self.metrics_file is not None:
            self._metrics = MetricsFile(Path(self.metrics_file))

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        data_dir: str | Path | None = None,
        code_dir: str | Path | None = None,
        checkpoint_dir: str | Path | None = None,
        output_dir: str | Path | None = None,
        checkpoint_interval_steps: int = 100,
        checkpoint_signal: str = "SIGTERM",
        model_name: str = "model",
        keep_local: int = 3,
        handle_signal: bool = True,
    ) -> Run:
        """Build the run from the ``SPOTRUN_*`` contract, falling back to the arguments.

        Under spotrun the environment always wins, so that a script's own defaults can never send it away
        from the staged data or the restored checkpoints. Run directly, the arguments apply, and missing
        directories default to ``./data``, ``./checkpoints`` and ``./output`` under the current directory.

        Parameters
        ----------
        environ
            The environment to read; ``os.environ`` when omitted.
        data_dir, code_dir, checkpoint_dir, output_dir
            Directories used when the matching variable is not set.
        checkpoint_interval_steps
            Used when ``SPOTRUN_CHECKPOINT_INTERVAL_STEPS`` is not set.
        checkpoint_signal
            Signal name used when ``SPOTRUN_CHECKPOINT_SIGNAL`` is not set.
        model_name
            Model path relative to the output directory, used when ``SPOTRUN_MODEL`` is not set.
        keep_local
            Complete checkpoints kept locally.
        handle_signal
            Install the handler that sets :attr:`stop_requested` (only possible in the main thread).

        Returns
        -------
        Run
            The run, with its checkpoint and output directories created.
        """
        env = os.environ if environ is None else environ
        cwd = Path.cwd()

        def directory(variable: str, given: str | Path | None, default: str) -> Path:
            value = env.get(variable) or given or cwd / default
            return Path(value).resolve()

        run = cls(
            data_dir=directory(ENV_DATA_DIR, data_dir, "data"),
            code_dir=directory(ENV_CODE_DIR, code_dir, "."),
            checkpoint_dir=directory(ENV_CHECKPOINT_DIR, checkpoint_dir, "checkpoints"),
            output_dir=directory(ENV_OUTPUT_DIR, output_dir, "output"),
            checkpoint_interval_steps=int(
                env.get(ENV_CHECKPOINT_INTERVAL_STEPS) or checkpoint_interval_steps
            ),
            checkpoint_signal=parse_signal(env.get(ENV_CHECKPOINT_SIGNAL) or checkpoint_signal),
            model_name=env.get(ENV_MODEL) or model_name,
            job_id=env.get(ENV_JOB_ID) or None,
            attempt=int(env.get(ENV_ATTEMPT) or 1),
            keep_local=keep_local,
            progress_file=Path(env[ENV_PROGRESS_FILE]) if env.get(ENV_PROGRESS_FILE) else None,
            gpus_per_node=int(env[ENV_GPUS_PER_NODE]) if env.get(ENV_GPUS_PER_NODE) else None,
            checkpoint_interval_file=(
                Path(env[ENV_CHECKPOINT_INTERVAL_FILE]) if env.get(ENV_CHECKPOINT_INTERVAL_FILE) else None
            ),
            # Under torchrun only global rank 0 reports metrics, as it alone logs: one series, not one per rank.
            metrics_file=(
                Path(env[ENV_METRICS_FILE])
                if env.get(ENV_METRICS_FILE) and env.get("RANK", "0") == "0"
                else None
            ),
        )
        run.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        run.output_dir.mkdir(parents=True, exist_ok=True)
        if handle_signal:
            run.install_signal_handler()
        return run

    # -- progress ---------------------------------------------------------------------------

    def report_step(self, step: int, *, force: bool = False) -> None:
        """Tell the agent the latest step reached; cheap enough to call every step.

        The step goes to ``SPOTRUN_PROGRESS_FILE`` (replaced atomically) at most every
        :data:`PROGRESS_MIN_INTERVAL_SECONDS`; a step reported sooner is held and written by a later call, by
        :meth:`flush_progress`, or by :meth:`save_checkpoint`, :meth:`save_model` and
        :meth:`exit_for_preemption`. Nothing happens when the variable is not set (the script runs on its own).

        Parameters
        ----------
        step
            The number of steps completed.
        force
            Write now, whatever the time since the last write.
        """
        if self._progress is not None:
            self._progress.report(step, force=force)

    def flush_progress(self) -> None:
        """Write a step :meth:`report_step` held back, if any."""
        if self._progress is not None:
            self._progress.flush()

    def report_metrics(
        self, step: int | None, values: Mapping[str, float] | None = None, /, **named: float
    ) -> None:
        """Report training metrics at ``step``: ``run.report_metrics(120, loss=0.41, accuracy=0.88)``.

        Appended to ``SPOTRUN_METRICS_FILE`` as one JSON line; the agent ships them with the job's telemetry
        (and to CloudWatch on AWS). Under ``torchrun`` only global rank 0 (``RANK`` 0) writes; the other
        ranks' reports are checked and dropped. Without spotrun they are checked and dropped too.

        Parameters
        ----------
        step
            The step the values belong to (a non-negative integer), or None.
        values
            Values by name, for names that are not Python identifiers (``"eval/loss"``).
        **named
            More values by name.

        Raises
        ------
        ValueError
            A name not of 1 to 64 letters, digits or ``_ . / : -``, a value that is not a finite real number, more
            than 32 names, no value, or a negative step (:func:`spotrun.training.metrics.metrics_record`).
        """
        record = metrics_record(step, {**(values or {}), **named})
        if self._metrics is not None:
            self._metrics.append(record)

    # -- checkpoints --------------------------------------------------------------------------

    def checkpoint_due(self, step: int) -> bool:
        """Whether ``step`` is one at which a periodic checkpoint is taken; also reports ``step`` reached.

        Parameters
        ----------
        step
            The number of steps completed (passed on to :meth:`report_step`).

        Returns
        -------
        bool
            True for positive multiples of the checkpoint interval; under ``interval_steps: auto``, once the
            agent's interval has passed since the last save (or the start).
        """
        self.report_step(step)
        if self._interval is not None:
            return step > 0 and self._interval.due()
        return step > 0 and step % self.checkpoint_interval_steps == 0

    def checkpoints(self) -> list[Checkpoint]:
        """Complete local checkpoints, oldest first."""
        return [Checkpoint(step, path) for step, path in layout.local_checkpoints(self.checkpoint_dir)]

    def latest_checkpoint(self) -> Checkpoint | None:
        """The newest complete local checkpoint, to resume from, or None on a fresh start."""
        found = self.checkpoints()
        return found[-1] if found else None

    @staticmethod
    def checkpoint_step(path: str | Path) -> int | None:
        """The step of a checkpoint directory, from its name, or None if it is not one."""
        return layout.checkpoint_step(Path(path).name)

    def save_checkpoint(self, step: int, writer: Callable[[Path], object]) -> Path:
        """Write a checkpoint atomically.

        ``writer`` fills a temporary directory, which is then renamed to its final name: the agent uploads
        only directories with a final name, so it never sees a half-written checkpoint.

        Parameters
        ----------
        step
            The number of steps completed; it names the checkpoint.
        writer
            Called with the (empty) directory to write the checkpoint's files into.

        Returns
        -------
        Path
            The checkpoint directory. If a checkpoint of ``step`` already exists it is kept and returned: the
            checkpoint of a step is written once (the agent may already be uploading it).
        """
        if step < 0:
            raise ValueError("step must not be negative")
        final = self.checkpoint_dir / layout.checkpoint_name(step)
        if final.is_dir():
            return final
        started = self.clock()
        write_directory(final, writer)
        # What a checkpoint costs the training: the writer, the flushes and the rename (the agent's auto interval).
        seconds = self.clock() - started
        if self._interval is not None:
            self._interval.saved()
        self._prune_local()
        if self._progress is not None:
            # Only auto reads the save time; a step-based run's file stays the single step it always was.
            measured = seconds if self._interval is not None else None
            self._progress.report(step, force=True, save_seconds=measured)
        return final

    def _prune_local(self) -> None:
        for _, path in self.checkpoints()[: -self.keep_local]:
            shutil.rmtree(path, ignore_errors=True)

    # -- the model ----------------------------------------------------------------------------

    @property
    def model_path(self) -> Path:
        """Where the model goes: ``output_dir / model_name`` (``SPOTRUN_MODEL``, the manifest's model)."""
        return self.output_dir / self.model_name

    def save_model(self, writer: Callable[[Path], object]) -> Path:
        """Write the model atomically to :attr:`model_path`.

        Parameters
        ----------
        writer
            Called with a temporary path that keeps the model's file name at its end (so ``np.save`` does not
            append another suffix); it writes a file or creates a directory there.

        Returns
        -------
        Path
            :attr:`model_path`.
        """
        final = replace_path(self.model_path, writer)
        self.flush_progress()
        return final
