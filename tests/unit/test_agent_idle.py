"""The agent's idle watch: every GPU of the node below the threshold for the watch's seconds, without a break."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from datetime import UTC, datetime

from spotrun.agent.reporter import RecordingReporter
from spotrun.agent.supervision.idle import IdleFailure, IdleVerdict, IdleWatch
from spotrun.agent.supervision.supervisor import TrainingSupervisor
from spotrun.model.agent_protocol.command import TRAINING_IDLE, FailureCause, GpuIdleWatch
from spotrun.model.job.gpu_health import read_idle_cause
from spotrun.model.job.telemetry import GpuLine, GpuReading


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sample(*utilizations: float) -> GpuLine:
    gpus = [
        GpuReading(index=i, utilization=u, memory_used_mib=100, memory_total_mib=1000)
        for i, u in enumerate(utilizations)
    ]
    return GpuLine(at=datetime.now(UTC), gpus=gpus)


def watch(seconds: float = 60.0, below: float = 10.0, node: int = 0) -> tuple[IdleWatch, FakeClock]:
    clock = FakeClock()
    return IdleWatch(GpuIdleWatch(utilization_below=below, seconds=seconds), node, clock=clock), clock


def feed(idle: IdleWatch, clock: FakeClock, readings: list[tuple[float, ...]], every: float = 15.0) -> list:
    """One sample every ``every`` seconds, asking for the verdict after each (as the supervisor's ticks do)."""
    verdicts = []
    for utilizations in readings:
        clock.now += every
        idle.observe(sample(*utilizations))
        verdicts.append(idle.idle())
    return verdicts


def test_every_gpu_below_for_the_seconds_is_idle_with_the_highest_reading():
    # Given a watch of 60 s below 10 % on a two-GPU node
    idle, clock = watch()

    # When both GPUs read below 10 % every 15 s
    verdicts = feed(idle, clock, [(2, 3), (1, 9.5), (0, 0), (4, 1), (2, 2)])

    # Then the verdict comes once the readings span 60 s, with the highest reading of the stretch
    assert verdicts[:4] == [None, None, None, None]
    assert verdicts[4] == IdleVerdict(
        node=0, seconds=60.0, utilization_max=9.5, utilization_below=10.0, gpus=2
    )
    assert idle.verdict == verdicts[4]


def test_one_gpu_at_the_threshold_breaks_the_stretch():
    # Given a watch of 60 s below 10 %
    idle, clock = watch()

    # When one GPU of two reads exactly 10 % in the middle
    verdicts = feed(idle, clock, [(1, 1), (1, 1), (1, 10), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1)])

    # Then the stretch starts over after it: 60 s from the fourth sample is the eighth
    assert verdicts[:7] == [None] * 7
    assert verdicts[7] is not None
    assert verdicts[7].seconds == 60.0


def test_no_readings_make_no_decision_however_long_it_takes():
    # Given one idle reading, then nvidia-smi stops answering
    idle, clock = watch()
    feed(idle, clock, [(0,)])

    # When an hour passes without a reading
    clock.now += 3600

    # Then there is no verdict: time alone proves nothing
    assert idle.idle() is None


def test_a_restarted_command_starts_a_new_stretch():
    # Given 45 s of idle readings
    idle, clock = watch()
    feed(idle, clock, [(0,), (0,), (0,), (0,)])

    # When the command restarts and the readings go on
    idle.command_started()
    verdicts = feed(idle, clock, [(0,), (0,), (0,), (0,)])

    # Then the previous run's stretch does not count
    assert verdicts == [None, None, None, None]
    assert feed(idle, clock, [(0,)]) != [None]


def test_the_failure_cause_carries_the_node_the_seconds_and_the_highest_reading_as_control_reads_it():
    # Given a verdict on node 2 and the step's failure cause
    verdict = IdleVerdict(node=2, seconds=300.25, utilization_max=4.0, utilization_below=10.0, gpus=8)
    failure = FailureCause(message=verdict.describe(), exit_code=143, checkpoint_step=40)

    # When it is reported (the JSON cause the reporter sends)
    reporter = RecordingReporter()
    reporter.fail(TRAINING_IDLE, verdict.cause(failure))

    # Then the cause keeps the failure's fields and adds the idle ones, which the control plane reads back
    assert reporter.failure_cause is not None
    assert reporter.failure_cause["node"] == 2
    assert reporter.failure_cause["seconds"] == 300.25
    assert reporter.failure_cause["utilization_max"] == 4.0
    assert reporter.failure_cause["checkpoint_step"] == 40
    cause = read_idle_cause(json.dumps(reporter.failure_cause))
    assert (cause.node, cause.seconds, cause.utilization_max) == (2, 300.25, 4.0)
    assert verdict.describe() == (
        "every GPU (8) read below 10 % utilization for 300 s, at most 4 % (training.gpu_idle)"
    )
    assert isinstance(verdict.cause(failure), IdleFailure)


def test_the_supervisor_stops_an_idle_command_with_the_checkpoint_signal(tmp_path):
    # Given a command that saves and exits on SIGTERM, and a watch whose GPUs read idle for 0.3 s
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('saving', flush=True), sys.exit(143)))\n"
        "time.sleep(60)\n"
    )
    idle = IdleWatch(GpuIdleWatch(utilization_below=10, seconds=0.3))
    supervisor = TrainingSupervisor(
        [sys.executable, "-c", script],
        tmp_path,
        {"PATH": "/usr/bin:/bin"},
        tmp_path / "log.txt",
        restarts=2,
        max_runtime_seconds=60,
        checkpoint_signal=signal.SIGTERM,
        tick_seconds=0.05,
        idle=idle,
    )
    stop = threading.Event()

    def gpus_idle() -> None:
        while not stop.is_set():
            idle.observe(sample(0.0))
            time.sleep(0.05)

    feeder = threading.Thread(target=gpus_idle, daemon=True)
    feeder.start()

    # When it runs
    try:
        outcome = supervisor.run()
    finally:
        stop.set()
        feeder.join()

    # Then it was stopped as idle after its checkpoint signal, not restarted, long before its own end
    assert outcome.kind == "idle"
    assert outcome.runs == 1
    assert outcome.exit_code == 143
    assert outcome.seconds < 30
    assert outcome.message.startswith("every GPU (1) read below 10 % utilization for")
    log = (tmp_path / "log.txt").read_text()
    assert "sending SIGTERM" in log
    assert "saving" in log


def test_each_run_of_a_restarted_command_starts_the_idle_stretch_over(tmp_path):
    # Given a command that fails twice, restarted by the supervisor, and a watch recording when runs start
    class Recording(IdleWatch):
        starts = 0

        def command_started(self) -> None:
            Recording.starts += 1
            super().command_started()

    idle = Recording(GpuIdleWatch(utilization_below=10, seconds=60))
    supervisor = TrainingSupervisor(
        [sys.executable, "-c", "raise SystemExit(1)"],
        tmp_path,
        {"PATH": "/usr/bin:/bin"},
        tmp_path / "log.txt",
        restarts=1,
        max_runtime_seconds=60,
        checkpoint_signal=signal.SIGTERM,
        tick_seconds=0.05,
        idle=idle,
    )

    # When it runs
    outcome = supervisor.run()

    # Then the watch was told of both runs
    assert outcome.kind == "failed"
    assert outcome.runs == 2
    assert Recording.starts == 2
