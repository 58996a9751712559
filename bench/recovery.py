"""Recovery time after a spot interruption warning, with and without the replacement launched on the warning.

Recovery is measured from the warning (``notice_at`` of the interrupted attempt, set when EventBridge delivered
it) to training resumed (the next attempt entering TRAINING), through the real code path: the state machine,
the handlers and the agent in the embedded runtime. Boot delay and checkpoint upload time are configured: the
boot delay on the emulator's pools, the upload time through the size of the checkpoint the script writes.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from spotrun.aws.adapters import job_store
from spotrun.local.catalog import DEFAULT_ZONES, Pool
from spotrun.local.demo import EXAMPLE_DIR, control_plane_logs, drop_manifest, upload_example, wait_for_job
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job import Job, JobStatus


@dataclass(frozen=True)
class RecoveryConfig:
    """What one benchmark run is made of."""

    time_scale: float = 0.05
    boot_delay_seconds: float = 120.0  # on AWS's clock; the emulator waits boot_delay x time_scale
    checkpoint_padding_mb: int = 96  # extra bytes in each checkpoint, to give the upload a duration
    interrupt_after_seconds: float = 3.0  # of training, before the warning
    runs: int = 2


@dataclass(frozen=True)
class RecoveryRun:
    """One measured interruption."""

    overlap: bool
    recovery_seconds: float
    boot_seconds: float  # the replacement's BOOTING state, as the timeline saw it
    steps_lost: int | None


def _pools(config: RecoveryConfig) -> list[Pool]:
    return [
        Pool(
            "g4dn.xlarge", zone, 0.18 + index / 100, capacity=4, boot_delay_seconds=config.boot_delay_seconds
        )
        for index, zone in enumerate(DEFAULT_ZONES)
    ]


def _manifest(config: RecoveryConfig) -> bytes:
    text = (EXAMPLE_DIR / "manifest.yaml").read_text()
    command = '--step-seconds, "0.02"]'
    padded = f'--step-seconds, "0.02", --checkpoint-padding-mb, "{config.checkpoint_padding_mb}"]'
    return text.replace(command, padded).replace("name: tiny-regression", "name: recovery-bench").encode()


def _recovery(job: Job) -> tuple[float, float]:
    interrupted = job.attempts[0]
    assert interrupted.notice_at is not None, "the warning was not recorded"
    after = [change for change in job.timeline if change.at > interrupted.notice_at]
    resumed = next(change.at for change in after if change.status is JobStatus.TRAINING)
    booting = next(change.at for change in after if change.status is JobStatus.BOOTING)
    staging = next(change.at for change in after if change.status is JobStatus.STAGING)
    return (resumed - interrupted.notice_at).total_seconds(), (staging - booting).total_seconds()


def measure_once(config: RecoveryConfig, overlap: bool, workdir: Path) -> RecoveryRun:
    """Run the example job once in a fresh emulator, interrupt it once, and measure the recovery."""
    runtime = LocalRuntime(
        workdir,
        time_scale=config.time_scale,
        pools=_pools(config),
        settings_overrides={"overlap_replacement": overlap},
    )
    with control_plane_logs(workdir / "control-plane.log"), runtime:
        upload_example(runtime)
        submitted = drop_manifest(runtime, _manifest(config), "recovery-bench.yaml")
        store = job_store(runtime.settings.jobs_table, runtime.settings.region)
        deadline = time.monotonic() + 120
        while (job := store.get(submitted.job_id)) is None or job.status is not JobStatus.TRAINING:
            if time.monotonic() > deadline:
                raise TimeoutError("the job never started training")
            time.sleep(0.05)
        time.sleep(config.interrupt_after_seconds)
        runtime.interrupt(job.attempts[0].instance_id)
        finished = wait_for_job(runtime, submitted.job_id, timeout=300)
    if finished.status is not JobStatus.SUCCEEDED:
        raise RuntimeError(f"benchmark job ended {finished.status}: {finished.error}")
    recovery, boot = _recovery(finished)
    return RecoveryRun(overlap, round(recovery, 3), round(boot, 3), finished.attempts[0].steps_lost)


def measure(config: RecoveryConfig) -> dict[str, object]:
    """Alternate runs with and without overlap; report the medians and their ratio."""
    runs: list[RecoveryRun] = []
    with tempfile.TemporaryDirectory(prefix="spotrun-bench-") as scratch:
        for index in range(config.runs):
            for overlap in (True, False):
                runs.append(measure_once(config, overlap, Path(scratch) / f"{index}-{overlap}"))
    with_overlap = statistics.median(run.recovery_seconds for run in runs if run.overlap)
    without = statistics.median(run.recovery_seconds for run in runs if not run.overlap)
    return {
        "benchmark": "recovery after a spot interruption warning (warning -> training resumed)",
        "config": asdict(config),
        "emulated_boot_delay_seconds": config.boot_delay_seconds * config.time_scale,
        "runs": [asdict(run) for run in runs],
        "median_recovery_seconds_with_overlap": with_overlap,
        "median_recovery_seconds_without_overlap": without,
        "speedup_without_over_with": round(without / with_overlap, 2),
    }
