"""The agent's live log: batches within PutLogEvents' limits, in order, retried, masked, only new lines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from spotrun.agent.supervision.log_shipper import (
    EVENT_OVERHEAD_BYTES,
    MAX_BATCH_BYTES,
    MAX_BATCH_EVENTS,
    MAX_EVENT_BYTES,
    LogShipper,
    batches,
    event_size,
    live_log,
)

GROUP = "/spotrun/jobs-bucket"
STREAM = "tiny-0123456789ab/attempt-001"


def _error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, operation)  # type: ignore[arg-type]


class FakeLogs:
    """A CloudWatch Logs client that records what it is sent, and fails the next ``failures`` puts."""

    def __init__(self, *, stream_exists: bool = False, failures: int = 0, may_create: bool = True):
        self.streams: set[str] = {STREAM} if stream_exists else set()
        self.batches: list[list[dict[str, Any]]] = []
        self.failures = failures
        self.may_create = may_create
        self.creates = 0

    def create_log_stream(self, logGroupName: str, logStreamName: str) -> None:  # noqa: N803 - boto3's names
        self.creates += 1
        if not self.may_create:
            raise _error("AccessDeniedException", "CreateLogStream")
        if logStreamName in self.streams:
            raise _error("ResourceAlreadyExistsException", "CreateLogStream")
        self.streams.add(logStreamName)

    def put_log_events(self, logGroupName: str, logStreamName: str, logEvents: list[Any]) -> None:  # noqa: N803
        if logStreamName not in self.streams:
            raise _error("ResourceNotFoundException", "PutLogEvents")
        if self.failures:
            self.failures -= 1
            raise _error("ServiceUnavailable", "PutLogEvents")
        self.batches.append(list(logEvents))

    @property
    def messages(self) -> list[str]:
        return [event["message"] for batch in self.batches for event in batch]


def shipper(logs: FakeLogs, path: Path, **options: Any) -> LogShipper:
    return LogShipper(logs, GROUP, STREAM, path, interval_seconds=3600, **options)


def test_batches_stay_within_the_count_and_size_limits_in_order():
    # Given more events than one batch may hold, then events big enough to fill one by size
    small = [{"timestamp": 1, "message": f"line {n}"} for n in range(MAX_BATCH_EVENTS + 5)]
    big = [{"timestamp": 2, "message": "x" * (MAX_EVENT_BYTES)} for _ in range(5)]

    # When they are cut into batches
    found = batches(small + big)

    # Then no batch passes 10,000 events or 1,048,576 bytes, and the events keep their order
    assert all(len(batch) <= MAX_BATCH_EVENTS for batch in found)
    assert all(sum(event_size(event) for event in batch) <= MAX_BATCH_BYTES for batch in found)
    assert [event for batch in found for event in batch] == small + big
    assert len(found[0]) == MAX_BATCH_EVENTS
    assert event_size(big[0]) == MAX_EVENT_BYTES + EVENT_OVERHEAD_BYTES


def test_only_lines_written_after_start_are_shipped_and_a_partial_line_waits(tmp_path: Path):
    # Given a log that already holds setup's lines when the shipper starts
    log = tmp_path / "attempt-001.log"
    log.write_bytes(b"setup line\n")
    logs = FakeLogs(stream_exists=True)
    live = shipper(logs, log).start()
    try:
        # When the command writes a line and half of another
        with log.open("ab") as handle:
            handle.write(b"step 1\n\nstep 2 hal")
        live.ship()

        # Then the complete lines are shipped (a blank one as a space: CloudWatch refuses empty messages)
        assert logs.messages == ["step 1", " "]
    finally:
        # And the partial line goes with the final flush
        live.stop()
    assert logs.messages == ["step 1", " ", "step 2 hal"]


def test_a_refused_batch_is_retried_on_the_next_tick_without_loss_or_reordering(tmp_path: Path):
    # Given CloudWatch that fails the first put
    log = tmp_path / "attempt-001.log"
    log.touch()
    logs = FakeLogs(failures=1)
    live = shipper(logs, log).start()
    with log.open("ab") as handle:
        handle.write(b"a\nb\n")

    # When the shipper ships twice, more lines coming in between
    assert live.ship() == 0  # failed, never raised
    with log.open("ab") as handle:
        handle.write(b"c\n")
    sent = live.ship()
    live.stop()

    # Then every line arrives once, in order; the missing stream was created once, on the first try
    assert sent == 3
    assert logs.messages == ["a", "b", "c"]
    assert (logs.streams, logs.creates) == ({STREAM}, 1)


def test_a_stream_the_control_plane_opened_is_written_without_creating_it(tmp_path: Path):
    # Given the attempt's stream made when the job's credentials were issued, which may not create streams
    log = tmp_path / "attempt-001.log"
    log.touch()
    logs = FakeLogs(stream_exists=True, may_create=False)
    live = shipper(logs, log).start()
    with log.open("ab") as handle:
        handle.write(b"a\n")

    # When it ships, Then the line is written, and no stream creation was even tried
    live.stop()
    assert (logs.messages, logs.creates) == (["a"], 0)


def test_every_line_is_masked_before_it_leaves_and_an_oversized_one_is_cut(tmp_path: Path):
    # Given a mask and a line over the 256 KB event limit
    log = tmp_path / "attempt-001.log"
    log.touch()
    logs = FakeLogs()
    live = shipper(logs, log, mask=lambda text: text.replace("hunter2", "***")).start()
    with log.open("ab") as handle:
        handle.write(b"token=hunter2\n" + b"y" * (300 * 1024) + b"\n")

    # When it ships
    live.stop()

    # Then the secret never left, and the long line was cut to the limit
    assert logs.messages[0] == "token=***"
    assert len(logs.messages[1].encode()) == MAX_EVENT_BYTES


# The shipper promises a line within one interval of its writing; this much more is left for the thread to be
# scheduled and the put to run on a loaded machine.
SHIP_INTERVAL = 0.5
SCHEDULING_TOLERANCE = 0.3


def _shipped(logs: FakeLogs, count: int, timeout: float) -> float:
    """Wait until ``count`` messages were shipped; the time they were first seen (inf: never)."""
    deadline = time.monotonic() + timeout
    while len(logs.messages) < count:
        if time.monotonic() > deadline:
            return float("inf")
        time.sleep(0.005)
    return time.monotonic()


def test_the_thread_ships_within_its_interval_and_an_existing_stream_is_reused(tmp_path: Path):
    # Given a stream the stage step created, and a shipper ticking every 0.5 s
    log = tmp_path / "attempt-001.log"
    log.touch()
    logs = FakeLogs(stream_exists=True)
    with LogShipper(logs, GROUP, STREAM, log, interval_seconds=SHIP_INTERVAL):
        # When a line is written, and a second one just after the tick that shipped the first (the worst case: it
        # waits a whole interval)
        with log.open("ab") as handle:
            handle.write(b"epoch 1\n")
        first = _shipped(logs, 1, timeout=5)
        with log.open("ab") as handle:
            handle.write(b"epoch 2\n")
        second = _shipped(logs, 2, timeout=5)
        # Then each is shipped without waiting for the end, the second within one interval of its writing
        assert logs.messages == ["epoch 1", "epoch 2"]
        assert second - first <= SHIP_INTERVAL + SCHEDULING_TOLERANCE
    # And the existing stream was used as it was
    assert logs.creates == 0


def test_the_attempts_live_log_goes_to_its_stream_in_the_deployments_group(tmp_path: Path):
    # When the live log of attempt 1 is asked for, Then it ships to the layout's group and stream
    live = live_log(FakeLogs(), "jobs-bucket", "tiny-0123456789ab", 1, tmp_path / "x.log")
    assert isinstance(live, LogShipper)
    assert (live.group, live.stream) == (GROUP, STREAM)


def test_without_a_logs_client_nothing_is_shipped(tmp_path: Path):
    # Given no CloudWatch Logs client, When the live log is asked for, Then it is a no-op block
    with live_log(None, "jobs-bucket", "tiny-0123456789ab", 1, tmp_path / "x.log") as live:
        assert live is None
