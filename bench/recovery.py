"""Recovery after a spot interruption: the warning -> the first training step of the resumed attempt.

One measurement (``python -m bench.recovery --once --mode MODE``, a fresh process each) runs the example
job through the real code path in the embedded runtime (state machine, handlers, agents as subprocesses), with
the replacement reachable 120 s after its launch on AWS's clock (6 s at the time scale 0.05: EC2 running after
60 s, its SSM agent registered 60 s later) and a 96 MiB checkpoint every 10 s of training. Once the first
checkpoint is committed (its marker in S3), the instance is interrupted; the measurement ends when the resumed
attempt has trained its first step (a job that ends first is an error).

How the times are taken. A probe thread in the measuring process polls, every :data:`POLL_SECONDS`, what the
emulator exposes and what the instances write, and records the wall-clock time it first sees each event:

- the warning: the interrupted instance's IMDS ``spot/instance-action`` document becoming set (the emulator
  publishes the notice and the EventBridge warning together; the notice's ``time`` field has whole seconds
  only, so it is the moment the probe sees it, within one poll);
- the end: the modification time of the resumed attempt's progress file (``SPOTRUN_PROGRESS_FILE``) when it
  first appears. The training script writes that file at its first step after the restore (the first write
  is never held back) and rewrites it at most every 0.1 s, so the first file the probe sees (polling 100
  times as often) carries the first step, and its mtime is the real time of that step, not the probe's. The
  step it holds is recorded and checked against the restored step + 1. Status TRAINING in the job record
  would come before the script has loaded the checkpoint; the S3 progress document comes after the agent's
  next poll.
- the parts: the replacement's launch (the emulator's instance appears) and reachability (booted and its SSM
  agent registered: the control plane can send it a command); the upload of the checkpoint the replacement
  restored, from its directory complete on the old instance's disk to its commit marker in S3 (the marker's
  own LastModified, read from moto's in-process backend); the restore, from the first entry in the
  replacement's checkpoint directory (the restore's temporary directory) to the checkpoint complete there.

Three configurations (:data:`MODES`) run interleaved (A B C A B C ...):

- ``overlap``: the replacement launched on the warning (``overlap_replacement`` true), what spotrun does;
- ``sequential``: launched once the old instance's attempt has ended, its checkpoint committed, and the control
  plane has released it (``overlap_replacement`` false): the old instance is gone because spotrun terminated it;
- ``reclaimed``: the same, but EC2 launches nothing before it has reclaimed the old instance at the end of the
  two-minute notice (:func:`launch_after`): the old instance is gone because EC2 took it back. A control
  plane that does not act on the warning learns of the interruption from that reclaim, so this is when it
  launches a replacement at the earliest.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, Self, TypeVar

from bench.common import MeasurementError, child_main, config_flags, interleaved, run_once
from bench.recovery_report import markdown, summarize
from bench.recovery_timeline import IncompleteTimeline, Timeline, recovery_figures

POLL_SECONDS = 0.01
# A checkpoint whose save and upload take most of the boot (and still fit the notice): the second size measured.
LARGE_CHECKPOINT_MB = 256
Mode = Literal["overlap", "sequential", "reclaimed"]
MODES: tuple[Mode, ...] = ("overlap", "sequential", "reclaimed")


@dataclass(frozen=True)
class RecoveryConfig:
    """What one measurement is made of."""

    time_scale: float = 0.05
    # The "boot 6 s (scaled 120 s)": the replacement takes commands 120 s after its launch on AWS's clock,
    # EC2 reporting it running after 60 s and its SSM agent registering 60 s later (the emulator waits each
    # x time_scale). The bench's "boot" is that whole span, launch -> reachable.
    boot_delay_seconds: float = 60.0
    ssm_registration_delay_seconds: float = 60.0
    checkpoint_padding_mb: int = 96  # extra MiB in each checkpoint, so that upload and restore take time
    step_seconds: float = 0.02
    # A checkpoint every 10 s of training: longer than a 96 MiB upload takes here even under load, so the save on
    # the warning is never queued behind an earlier checkpoint's upload (the agent uploads one at a time).
    checkpoint_interval_steps: int = 500
    steps: int = 5000  # never reached: the measurement ends at the resumed attempt's first step
    timeout_seconds: float = 180.0


# -- the measurement (in the child process) ---------------------------------------------------------------


class _Observed(Protocol):
    warning: float | None  # when the probe saw the warning (None: not yet)


TimelineT = TypeVar("TimelineT", bound=_Observed)


class RecoveryProbe(Generic[TimelineT]):
    """A thread that polls the runtime every :data:`POLL_SECONDS` while it runs (``with``); a subclass's ``poll``.

    ``poll`` fills the subclass's timeline, sets ``first_commit`` once a checkpoint is committed and ``resumed``
    at the resumed attempt's first step. A poll that raises ends the probe: ``error`` holds it, both events set.
    """

    thread_name = "recovery-probe"

    def __init__(self, runtime: Any, job_id: str, timeline: TimelineT):
        from moto.s3.models import s3_backends

        from spotrun.local.server import ACCOUNT_ID

        self.runtime = runtime
        self.job_id = job_id
        self.timeline = timeline
        self.bucket = runtime.settings.jobs_bucket
        self._s3 = s3_backends[ACCOUNT_ID]["aws"]
        self.first_commit = threading.Event()
        self.resumed = threading.Event()  # the resumed attempt's first step was seen
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.poll(time.time())
            except Exception as exc:  # a probe that died would leave a timeline that lies: stop the run
                self.error = exc
                self.first_commit.set()
                self.resumed.set()
                raise

    def poll(self, now: float) -> None:
        """Record what changed since the last poll."""
        raise NotImplementedError

    def reclaim_seen(self, at: float) -> None:
        """EC2 reclaimed the warned instance at ``at`` and the held launch was let through (``reclaimed`` mode)."""

    def _paths(self, sim: Any) -> Any:
        from spotrun.model.layout import NvmeLayout

        return NvmeLayout(sim.nvme_dir, self.job_id)

    def _committed_at(self, step: int) -> float | None:
        from spotrun.model.layout import commit_marker_key

        bucket = self._s3.buckets.get(self.bucket)
        key = commit_marker_key(self.job_id, step)
        if bucket is None or key not in bucket.keys:
            return None
        stamp = getattr(bucket.keys[key], "last_modified", None)  # moto: naive UTC, microseconds
        return stamp.replace(tzinfo=UTC).timestamp() if stamp is not None else time.time()


class Probe(RecoveryProbe[Timeline]):
    """Polls the runtime's instances and S3 and fills a :class:`Timeline` (see the module docstring)."""

    def __init__(self, runtime: Any, job_id: str):
        super().__init__(runtime, job_id, Timeline())
        self.old: Any = None
        self.replacement: Any = None

    def poll(self, now: float) -> None:
        """Record what changed since the last poll."""
        from spotrun.agent.supervision.progress import read_progress
        from spotrun.model.layout import local_checkpoints

        t = self.timeline
        sims = self.runtime.instances
        if self.old is None:
            for sim in sims:
                if local_checkpoints(self._paths(sim).checkpoint_dir):
                    self.old = sim
        if self.old is None:
            return
        for step, _ in local_checkpoints(self._paths(self.old).checkpoint_dir):
            t.old_saved.setdefault(step, now)
        for step in t.old_saved:
            if step not in t.old_committed and (at := self._committed_at(step)) is not None:
                t.old_committed[step] = at
                self.first_commit.set()
        for progress_file in self._paths(self.old).runtime_dir.glob("progress-attempt-*"):
            if (progress := read_progress(progress_file)) is not None:
                t.old_last_step = progress.step
        if t.warning is None:
            if self.old.metadata.instance_action is not None:
                t.warning = now
            return
        if self.replacement is None:
            later = [sim for sim in sims if sim is not self.old]
            if not later:
                return
            self.replacement = later[0]
            t.launched = now
        sim = self.replacement
        if t.reachable is None and sim.managed:
            t.reachable = now
        checkpoint_dir = self._paths(sim).checkpoint_dir
        if t.restore_started is None and checkpoint_dir.is_dir() and any(checkpoint_dir.iterdir()):
            t.restore_started = now
        for step, _ in local_checkpoints(checkpoint_dir):
            t.restored.setdefault(step, now)
        if t.first_step is None:
            for progress_file in self._paths(sim).runtime_dir.glob("progress-attempt-*"):
                if (progress := read_progress(progress_file)) is not None:
                    t.first_step = (progress.step, progress.updated_at.timestamp())
                    self.resumed.set()


def _manifest(config: RecoveryConfig) -> bytes:
    from spotrun.local.demo import EXAMPLE_DIR

    text = (EXAMPLE_DIR / "manifest.yaml").read_text()
    command, interval = '--step-seconds, "0.02"]', "interval_steps: 50\n"
    if command not in text or interval not in text:
        raise RuntimeError("the example's manifest changed: update the recovery bench's edits of it")
    text = text.replace(interval, f"interval_steps: {config.checkpoint_interval_steps}\n")
    padded = (
        f'--step-seconds, "{config.step_seconds}", --steps, "{config.steps}", '
        f'--checkpoint-padding-mb, "{config.checkpoint_padding_mb}"]'
    )
    return text.replace(command, padded).replace("name: tiny-regression", "name: recovery-bench").encode()


def launch_after(reclaimed: threading.Event) -> Any:
    """Hold every instant fleet EC2 is asked for until ``reclaimed`` is set (the ``reclaimed`` mode).

    Installed on moto's ``FleetsBackend.create_fleet`` over the emulator's own patch, so that the fleet is then
    planned and launched as usual: the acquisition's ``CreateFleet`` call only returns later.

    Returns
    -------
    PatchSet
        Undo it with ``undo_all()``.
    """
    from moto.ec2.models.fleets import FleetsBackend

    from spotrun.local.patches.reversible import PatchSet

    launch = FleetsBackend.create_fleet

    def create_fleet(self: Any, **kwargs: Any) -> Any:
        reclaimed.wait()
        return launch(self, **kwargs)

    patches = PatchSet()
    patches.add(FleetsBackend, "create_fleet", create_fleet)
    return patches


def _signal_reclaim(
    reclaimed: threading.Event, notice_ends: float, gone: threading.Event, probe: RecoveryProbe[Any]
) -> None:
    """Set ``reclaimed`` once the notice is over and the instance gone (at once if spotrun released it first)."""
    time.sleep(max(0.0, notice_ends - time.time()))
    gone.wait()
    probe.reclaim_seen(time.time())
    reclaimed.set()


@contextmanager
def interruption(
    runtime: Any, probe: RecoveryProbe[Any], instance_id: str, *, hold_launch: bool, time_scale: float
) -> Iterator[None]:
    """Interrupt ``instance_id`` for the block's length; with ``hold_launch``, EC2 launches nothing before it has
    reclaimed the instance at the end of the notice (the ``reclaimed`` modes, :func:`launch_after`)."""
    from spotrun.model.job.interruption_rate import NOTICE_SECONDS

    reclaimed = threading.Event()
    held = launch_after(reclaimed) if hold_launch else None
    gone = runtime.interrupt(instance_id)
    try:
        if held is not None:
            while probe.timeline.warning is None and probe.error is None:
                time.sleep(POLL_SECONDS)
            # The emulator reclaims the instance the notice's (scaled) length after it set the warning.
            notice_ends = (probe.timeline.warning or 0.0) + NOTICE_SECONDS * time_scale
            threading.Thread(
                target=_signal_reclaim, args=(reclaimed, notice_ends, gone, probe), daemon=True
            ).start()
        yield
    finally:
        reclaimed.set()  # a fleet still held (the run failed first) is let go before the runtime stops
        if held is not None:
            held.undo_all()


def await_seen(
    event: threading.Event, probe: RecoveryProbe[Any], store: Any, job_id: str, timeout: float, what: str
) -> Any:
    """Wait for the probe's ``event``; return the job record then.

    Raises
    ------
    RuntimeError
        When the job ended first, or the probe failed.
    TimeoutError
        When ``timeout`` seconds passed first.
    """
    deadline = time.monotonic() + timeout
    while not event.wait(0.5):
        job = store.get(job_id)
        if job is not None and job.status.is_terminal:
            raise RuntimeError(f"the job ended {job.status} before {what}: {job.error}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"never observed: {what}")
    if probe.error is not None:
        raise RuntimeError(f"the probe failed: {probe.error!r}")
    return store.get(job_id)


def measure_once(config: RecoveryConfig, mode: Mode, workdir: Path) -> dict[str, Any]:
    """Run the example job in this process's emulator, interrupt it once, and return what was seen.

    The measurement ends at the resumed attempt's first step: the rest of the job (its other checkpoints, its
    outputs) measures nothing here and would double the run. A job that ends before that is an error.
    """
    from spotrun.aws.adapters import job_store
    from spotrun.local.capacity.catalog import DEFAULT_ZONES, Pool
    from spotrun.local.demo import control_plane_logs, drop_manifest, upload_example
    from spotrun.local.runtime import LocalRuntime

    pools = [
        Pool("g4dn.xlarge", zone, 0.18 + i / 100, capacity=4, boot_delay_seconds=config.boot_delay_seconds)
        for i, zone in enumerate(DEFAULT_ZONES)
    ]
    runtime = LocalRuntime(
        workdir,
        time_scale=config.time_scale,
        pools=pools,
        settings_overrides={"overlap_replacement": mode == "overlap"},
    )
    runtime.manager.ssm_registration_delay_seconds = config.ssm_registration_delay_seconds
    with control_plane_logs(workdir / "control-plane.log"), runtime:
        upload_example(runtime)
        submitted = drop_manifest(runtime, _manifest(config), "recovery-bench.yaml")
        with Probe(runtime, submitted.job_id) as probe:
            if not probe.first_commit.wait(config.timeout_seconds) or probe.error is not None:
                raise RuntimeError(f"no checkpoint was committed (probe error: {probe.error!r})")
            store = job_store(runtime.settings.jobs_table, runtime.settings.region)
            hold = mode == "reclaimed"
            with interruption(
                runtime, probe, probe.old.instance_id, hold_launch=hold, time_scale=config.time_scale
            ):
                job = await_seen(
                    probe.resumed, probe, store, submitted.job_id, config.timeout_seconds, "it resumed"
                )
    return {
        "mode": mode,
        "timeline": probe.timeline.as_dict(),
        "recorded_steps_lost": job.attempts[0].steps_lost if job is not None and job.attempts else None,
    }


# -- the section (in the parent process) ------------------------------------------------------------------


def run(runs: int, config: RecoveryConfig | None = None) -> dict[str, Any]:
    """Measure ``runs`` interruptions in each of :data:`MODES` at each checkpoint size, interleaved.

    The sizes are the issue's (``config.checkpoint_padding_mb``, 96 MiB) and :data:`LARGE_CHECKPOINT_MB`, whose
    upload takes most of the boot: what the overlap saves is the upload, so the second size shows how the ratio
    to the baseline moves with it. Each measurement runs in a fresh process.
    """
    config = config or RecoveryConfig()
    sizes = {
        mib: dataclasses.replace(config, checkpoint_padding_mb=mib)
        for mib in dict.fromkeys((config.checkpoint_padding_mb, LARGE_CHECKPOINT_MB))
    }
    measured: dict[int, list[dict[str, Any]]] = {mib: [] for mib in sizes}
    for index, (mib, mode) in interleaved([(m, mode) for m in sizes for mode in MODES], runs):
        label = f"{mib} MiB, {mode}"
        print(f"   recovery run {index + 1}/{runs}, {label}", flush=True)
        args = ["--mode", mode, *config_flags(sizes[mib])]
        item = run_once("bench.recovery", args, timeout=900)
        try:
            recovery_figures(Timeline.from_dict(item["timeline"]))
        except IncompleteTimeline as exc:
            raise MeasurementError(f"recovery run {index + 1} ({label}): {exc}: {item}") from exc
        measured[mib].append(item)
    results = {str(mib): summarize(measured[mib], sizes[mib]) for mib in sizes}
    tables = [f"### Checkpoint of {mib} MiB\n\n{markdown(results[str(mib)])}" for mib in sizes]
    return {
        "name": "recovery",
        "title": "Recovery: spot warning → first training step of the resumed attempt",
        "markdown": "\n\n".join(tables),
        "results": results,
    }


if __name__ == "__main__":
    child_main(sys.argv[1:], RecoveryConfig, MODES, measure_once)
