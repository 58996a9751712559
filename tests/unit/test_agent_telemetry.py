"""The telemetry shipper: the metrics file tailed by byte offset, GPU samples gathered, numbered parts put (moto S3),
bounded, and the training metrics sent to CloudWatch in batches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from spotrun.agent.supervision import telemetry as shipping
from spotrun.agent.supervision.telemetry import (
    TelemetryShipper,
    cloudwatch_data,
    parse_report,
    sample_seconds,
)
from spotrun.local.iam.policy.evaluate import allowed
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand, GpuIdleWatch
from spotrun.model.agent_protocol.session_policy import job_session_policy
from spotrun.model.job.telemetry import GpuLine, GpuReading, MetricsLine, assemble, parse_lines
from spotrun.model.manifest.schema import JobManifest

BUCKET = "spotrun-jobs"
JOB = "tiny-0123456789ab"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def s3(monkeypatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class RecordingMetrics:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []

    def put(self, namespace: str, data: list[dict[str, Any]]) -> None:
        self.calls.append((namespace, data))


def shipper(s3: Any, tmp_path: Path, node: int = 0, **options: Any) -> tuple[TelemetryShipper, Path]:
    path = tmp_path / "metrics-attempt-002.jsonl"
    return TelemetryShipper(s3, BUCKET, JOB, 2, node, path, clock=Clock(), **options), path


def append(path: Path, text: str) -> None:
    with path.open("ab") as handle:
        handle.write(text.encode())


def parts(s3: Any) -> dict[str, str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=layout.telemetry_prefix(JOB)).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read().decode() for o in listed}


def gpu_line(at: datetime, utilization: float = 50.0) -> GpuLine:
    reading = GpuReading(
        index=0, utilization=utilization, memory_used_mib=10, memory_total_mib=100, pcie_rx_mib_s=1.5
    )
    return GpuLine(at=at, gpus=[reading])


def test_the_file_is_tailed_by_offset_and_a_partial_last_line_waits_for_its_newline(s3, tmp_path):
    # Given a shipper of node 1 and a script that wrote one whole line and half of the next
    telemetry, path = shipper(s3, tmp_path, node=1)
    append(path, '{"step": 1, "values": {"loss": 0.9}}\n{"step": 2, "val')

    # When it ships, the script finishes the line, and it ships again
    first = telemetry.ship()
    append(path, 'ues": {"loss": 0.8}}\n')
    second = telemetry.ship()

    # Then two parts, numbered in order at the node's key, each with its own reports, stamped when read
    assert first == layout.telemetry_key(JOB, 2, 1, 1)
    assert second == layout.telemetry_key(JOB, 2, 1, 2)
    stored = parts(s3)
    one, _ = parse_lines(stored[first])
    two, _ = parse_lines(stored[second])
    assert [(line.step, line.values) for line in one] == [(1, {"loss": 0.9})]
    assert [(line.step, line.values) for line in two] == [(2, {"loss": 0.8})]
    assert all(isinstance(line, MetricsLine) and line.at > T0 for line in one + two)
    # and nothing new means nothing put
    assert telemetry.ship() is None
    assert len(parts(s3)) == 2


def test_gpu_samples_and_reports_go_in_time_order_and_assemble_into_series(s3, tmp_path):
    # Given two GPU samples around a report
    telemetry, path = shipper(s3, tmp_path)
    telemetry.add_gpu(gpu_line(T0 - timedelta(seconds=5), 97.0))
    append(path, '{"step": 7, "values": {"loss": 0.5, "accuracy": 0.75}}\n')
    telemetry.add_gpu(gpu_line(T0 + timedelta(minutes=5), 3.0))

    # When it ships
    key = telemetry.ship()

    # Then the part's lines are in time order, and the control plane's reader builds the series from them
    assert key is not None
    text = parts(s3)[key]
    kinds = [json.loads(line)["kind"] for line in text.splitlines()]
    assert kinds == ["gpu", "metrics", "gpu"]
    series = assemble([(2, 0, text)])
    assert [p.value for p in series.metrics["accuracy"]] == [0.75]
    assert [(p.gpu, p.utilization, p.pcie_rx_mib_s) for p in series.gpu] == [(0, 97.0, 1.5), (0, 3.0, 1.5)]
    assert series.skipped_lines == 0


def test_lines_that_are_not_reports_are_skipped_and_counted(s3, tmp_path, caplog):
    # Given a file with a good line, garbage, a string value, a bad name, a float step, NaN only, and a blank line
    telemetry, path = shipper(s3, tmp_path)
    append(
        path,
        '{"step": 1, "values": {"loss": 1.0}}\nnot json\n{"step": 2, "values": {"loss": "0.5"}}\n'
        '{"values": {"a b": 1}}\n{"step": 1.5, "values": {"loss": 1}}\n{"values": {"loss": NaN}}\n\n'
        '[1, 2]\n{"step": 3, "values": {"loss": 0.7, "gone": NaN}}\n',
    )

    # When it ships
    key = telemetry.ship()

    # Then the good lines are shipped (a NaN value left out), the six others counted and the first ones logged
    assert key is not None
    shipped, _ = parse_lines(parts(s3)[key])
    assert [line.values for line in shipped] == [{"loss": 1.0}, {"loss": 0.7}]
    assert telemetry.skipped == 6
    assert "line skipped" in caplog.text


def test_an_overlong_line_is_skipped_whole_however_it_arrives(s3, tmp_path, monkeypatch):
    # Given a small line bound and a line longer than it, written in two halves, then a good line
    monkeypatch.setattr(shipping, "MAX_LINE_BYTES", 64)
    telemetry, path = shipper(s3, tmp_path)
    append(path, '{"values": {"' + "x" * 100)
    telemetry.read_metrics()
    append(path, "y" * 100)
    telemetry.read_metrics()
    append(path, '": 1}}\n{"values": {"ok": 1}}\n')

    # When it ships
    key = telemetry.ship()

    # Then only the good line went, and the long one counted once
    assert key is not None
    shipped, _ = parse_lines(parts(s3)[key])
    assert [line.values for line in shipped] == [{"ok": 1.0}]
    assert telemetry.skipped == 1


def test_a_part_holds_at_most_the_bound_of_reports_evenly_thinned(s3, tmp_path):
    # Given a bound of 10 reports per part and 100 reports
    telemetry, path = shipper(s3, tmp_path, max_lines=10)
    append(path, "".join(f'{{"step": {n}, "values": {{"loss": {n}}}}}\n' for n in range(100)))
    telemetry.add_gpu(gpu_line(T0))

    # When it ships
    key = telemetry.ship()

    # Then 10 reports went, the first and the last among them, with the GPU sample
    assert key is not None
    shipped, _ = parse_lines(parts(s3)[key])
    steps = [line.step for line in shipped if isinstance(line, MetricsLine)]
    assert len(steps) == 10
    assert (steps[0], steps[-1]) == (0, 99)
    assert sum(isinstance(line, GpuLine) for line in shipped) == 1
    assert telemetry.thinned == 90


def test_past_the_attempts_byte_bound_nothing_more_is_put(s3, tmp_path, caplog):
    # Given a bound of 400 bytes for the attempt
    telemetry, path = shipper(s3, tmp_path, max_bytes=400)
    append(path, '{"step": 1, "values": {"loss": 1}}\n')
    assert telemetry.ship() is not None

    # When more than the rest of the bound comes
    append(path, "".join(f'{{"step": {n}, "values": {{"loss": 1}}}}\n' for n in range(2, 12)))
    later = telemetry.ship()
    append(path, '{"step": 99, "values": {"loss": 1}}\n')

    # Then it is not put, and neither is anything after it; it is said once
    assert later is None
    assert telemetry.ship() is None
    assert telemetry.exhausted
    assert len(parts(s3)) == 1
    assert caplog.text.count("later lines are not shipped") == 1


def test_a_rerun_of_the_step_continues_after_the_parts_already_there(s3, tmp_path):
    # Given parts 1 and 3 of this attempt and node already put (an earlier run of the step), and another node's
    for part, node in ((1, 0), (3, 0), (7, 1)):
        s3.put_object(Bucket=BUCKET, Key=layout.telemetry_key(JOB, 2, node, part), Body=b"")
    telemetry, path = shipper(s3, tmp_path)
    append(path, '{"values": {"loss": 1}}\n')

    # When / Then the next part is 4: nothing is overwritten
    assert telemetry.ship() == layout.telemetry_key(JOB, 2, 0, 4)


def test_a_failed_put_keeps_the_lines_for_the_next(s3, tmp_path, caplog):
    # Given a put that fails once
    telemetry, path = shipper(s3, tmp_path)
    append(path, '{"step": 1, "values": {"loss": 1}}\n')
    real = s3.put_object
    calls = []

    def flaky(**kwargs: Any) -> Any:
        calls.append(kwargs["Key"])
        if len(calls) == 1:
            raise ConnectionError("S3 unreachable")
        return real(**kwargs)

    s3.put_object = flaky

    # When the ticker ships twice
    assert telemetry.ship_quietly() is True
    append(path, '{"step": 2, "values": {"loss": 1}}\n')
    telemetry.ship_quietly()

    # Then the second put holds both reports, as part 1
    assert "telemetry not put (kept for the next put): S3 unreachable" in caplog.text
    assert calls == [layout.telemetry_key(JOB, 2, 0, 1)] * 2
    shipped, _ = parse_lines(parts(s3)[calls[1]])
    assert [line.step for line in shipped] == [1, 2]


def test_the_training_metrics_go_to_cloudwatch_in_batches_of_at_most_1000(s3, tmp_path, monkeypatch):
    # Given a CloudWatch port and 700 reports of two values each
    metrics = RecordingMetrics()
    telemetry, path = shipper(s3, tmp_path, metrics=metrics)
    append(path, "".join(f'{{"step": {n}, "values": {{"loss": 1, "acc": 0.5}}}}\n' for n in range(700)))
    telemetry.add_gpu(gpu_line(T0))

    # When it ships
    telemetry.ship()

    # Then 1400 values went in two calls in the spotrun namespace, named as reported, per job
    assert [(namespace, len(data)) for namespace, data in metrics.calls] == [
        ("spotrun", 1000),
        ("spotrun", 400),
    ]
    first = metrics.calls[0][1][0]
    assert first["MetricName"] == "loss"
    assert first["Dimensions"] == [{"Name": "JobId", "Value": JOB}]
    assert first["Value"] == 1.0
    assert isinstance(first["Timestamp"], datetime)


def test_cloudwatch_entries_are_one_per_value():
    # Given / When
    line = parse_report(b'{"step": 3, "values": {"a": 1, "b.c": 2.5}}', T0)
    data = cloudwatch_data("j-1", [line])

    # Then
    assert [(d["MetricName"], d["Value"], d["Timestamp"]) for d in data] == [("a", 1.0, T0), ("b.c", 2.5, T0)]


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        (
            (T0 - timedelta(seconds=4)).timestamp(),
            T0 - timedelta(seconds=4),
        ),  # written between two reads: kept
        ((T0 + timedelta(seconds=1)).timestamp(), T0),  # in the future: the read's time
        ((T0 - timedelta(hours=2)).timestamp(), T0),  # older than an hour: the read's time
        ("yesterday", T0),  # not a number: the read's time
    ],
)
def test_a_report_keeps_its_own_time_only_when_it_is_plausible(stamp: object, expected: datetime) -> None:
    # Given a line stamped by the training helper, read at T0
    raw = json.dumps({"step": 1, "values": {"loss": 0.5}, "at": stamp}).encode()

    # When it is parsed
    line = parse_report(raw, T0)

    # Then its time is the stamp within the last hour, else the read's time
    assert line.at == expected


def test_the_jobs_credentials_may_put_the_attempts_parts_of_any_node_and_nothing_else():
    # Given the session policy of attempt 2
    manifest = JobManifest.model_validate(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "training": {"command": ["python", "train.py"]},
        }
    )
    policy = job_session_policy(JOB, 2, manifest, jobs_bucket=BUCKET)["Statement"]
    objects = f"arn:aws:s3:::{BUCKET}"

    # When / Then its parts are writable, another attempt's and another job's are not
    assert allowed(policy, "s3:PutObject", f"{objects}/{layout.telemetry_key(JOB, 2, 0, 1)}")
    assert allowed(policy, "s3:PutObject", f"{objects}/{layout.telemetry_key(JOB, 2, 3, 42)}")
    assert not allowed(policy, "s3:PutObject", f"{objects}/{layout.telemetry_key(JOB, 1, 0, 1)}")
    assert not allowed(
        policy, "s3:PutObject", f"{objects}/{layout.telemetry_key('tiny-ba9876543210', 2, 0, 1)}"
    )
    # and the listing that numbers the parts is allowed
    prefix = layout.telemetry_key(JOB, 2, 0, 1).rsplit("/", 1)[0] + "/"
    assert allowed(policy, "s3:ListBucket", objects, {"s3:prefix": prefix})


def test_samples_come_often_enough_for_the_parts_and_the_idle_watch():
    # Given a command polling every 5 s, putting telemetry every 30 s (only these fields matter here)
    def command(telemetry_seconds: float, gpu_idle: GpuIdleWatch | None = None) -> AgentCommand:
        return AgentCommand.model_construct(
            poll_seconds=5.0, telemetry_seconds=telemetry_seconds, gpu_idle=gpu_idle
        )

    # When / Then: one sample per part, four per idle window, a minute at most
    assert sample_seconds(command(30.0)) == 30.0
    assert sample_seconds(command(30.0, GpuIdleWatch(utilization_below=10, seconds=60))) == 15.0
    assert sample_seconds(command(600.0)) == 60.0


def test_a_script_writing_faster_than_one_read_keeps_its_newest_lines(s3, tmp_path, monkeypatch, caplog):
    # Given reads of at most 200 bytes, and 40 reports (about 1.4 kB) written since the last read
    monkeypatch.setattr(shipping, "MAX_READ_BYTES", 200)
    telemetry, path = shipper(s3, tmp_path)
    append(path, "".join(f'{{"step": {n}, "values": {{"loss": 1}}}}\n' for n in range(40)))

    # When it ships
    key = telemetry.ship()

    # Then the newest whole reports went, up to the last; the older bytes were left behind, and it was said
    assert key is not None
    shipped, skipped = parse_lines(parts(s3)[key])
    steps = [line.step for line in shipped]
    assert skipped == 0
    assert steps == list(range(steps[0], 40))
    assert 0 < len(steps) < 10
    assert telemetry.skipped == 0
    assert telemetry.skipped_bytes > 1000
    assert "written faster than they are shipped" in caplog.text


def test_a_cloudwatch_failure_is_logged_and_the_part_stays_put(s3, tmp_path, caplog):
    # Given a CloudWatch port that fails
    class Failing:
        def put(self, namespace: str, data: list[dict[str, Any]]) -> None:
            raise ConnectionError("throttled")

    telemetry, path = shipper(s3, tmp_path, metrics=Failing())
    append(path, '{"step": 1, "values": {"loss": 1}}\n')

    # When it ships twice
    key = telemetry.ship()
    again = telemetry.ship()

    # Then the part was put once, not again for the metrics' sake, and the failure was said
    assert key == layout.telemetry_key(JOB, 2, 0, 1)
    assert again is None
    assert len(parts(s3)) == 1
    assert "training metrics not put to CloudWatch: throttled" in caplog.text
