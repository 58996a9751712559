"""What `spotrun status` and the live view show of a job's GPUs and training metrics: each node's latest sample
(the record's or the telemetry's, whichever is newer), GPU memory above 90 % flagged, the latest value of each
metric, and --json carrying the same."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spotrun.cli import jobs as cli_jobs
from spotrun.cli.app import app
from spotrun.cli.attach import live_view
from spotrun.cli.client import ApiError
from spotrun.cli.display.gpu_health import TelemetryPoll, latest_node_gpus, live_parts, memory_high_flags
from spotrun.model.job.attempt import Attempt, NodeRun
from spotrun.model.job.gpu_health import GpuMemoryHigh
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.model.job.telemetry import GpuLine, JobTelemetry, assemble

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
JOB_ID = "tiny-000000000001"
runner = CliRunner()


def at(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def sample(seconds_ago: float, *gpus: tuple[float, float, float | None]) -> GpuLine:
    """A node's nvidia-smi sample: per GPU (utilization %, memory used MiB of 24576, PCIe rx MiB/s or None)."""
    return GpuLine.model_validate(
        {
            "at": at(seconds_ago).isoformat(),
            "gpus": [
                {
                    "index": i,
                    "utilization": utilization,
                    "memory_used_mib": used,
                    "memory_total_mib": 24576,
                    **({} if rx is None else {"pcie_rx_mib_s": rx, "pcie_tx_mib_s": rx / 10}),
                }
                for i, (utilization, used, rx) in enumerate(gpus)
            ],
        }
    )


def attempt(number: int, **fields: Any) -> Attempt:
    values: dict[str, Any] = {
        "number": number,
        "instance_id": f"i-{number:017x}",
        "instance_type": "g5.12xlarge",
        "availability_zone": "us-east-1a",
        "lifecycle": "spot",
        "price_per_hour": 1.7,
        "started_at": at(600 - number),
    }
    return Attempt.model_validate(values | fields)


def job(*attempts: Attempt, status: JobStatus = JobStatus.TRAINING) -> Job:
    return Job(
        job_id=JOB_ID,
        name="tiny",
        status=status,
        source=ManifestSource(),
        created_at=at(700),
        updated_at=at(1),
        attempts=list(attempts),
    )


def view(of: Job) -> dict[str, Any]:
    """The job as the API shows it (GET /jobs/{id})."""
    record = of.model_dump(mode="json", exclude={"version", "task_token"})
    record["status"] = of.status.value
    return record


# The lines the agents put, as JSON (spotrun.model.job.telemetry's format): attempt 1 went out of GPU memory on
# node 0's GPU 1; attempt 2 trains, its metrics at steps 110 and 120.
PARTS = [
    (
        1,
        0,
        "\n".join(
            [
                json.dumps(
                    {"kind": "metrics", "at": at(400).isoformat(), "step": 40, "values": {"loss": 0.9}}
                ),
                json.dumps(
                    {
                        "kind": "gpu",
                        "at": at(390).isoformat(),
                        "gpus": [
                            {
                                "index": 0,
                                "utilization": 95,
                                "memory_used_mib": 12000,
                                "memory_total_mib": 24576,
                            },
                            {
                                "index": 1,
                                "utilization": 96,
                                "memory_used_mib": 23800,
                                "memory_total_mib": 24576,
                            },
                        ],
                    }
                ),
            ]
        ),
    ),
    (
        2,
        0,
        "\n".join(
            [
                json.dumps(
                    {
                        "kind": "metrics",
                        "at": at(30).isoformat(),
                        "step": 110,
                        "values": {"loss": 0.5, "accuracy": 0.8},
                    }
                ),
                json.dumps(
                    {
                        "kind": "metrics",
                        "at": at(10).isoformat(),
                        "step": 120,
                        "values": {"loss": 0.41234, "accuracy": 0.88},
                    }
                ),
                json.dumps(
                    {
                        "kind": "gpu",
                        "at": at(5).isoformat(),
                        "gpus": [
                            {
                                "index": 0,
                                "utilization": 91,
                                "memory_used_mib": 15000,
                                "memory_total_mib": 24576,
                                "pcie_rx_mib_s": 420,
                                "pcie_tx_mib_s": 64,
                            },
                            {
                                "index": 1,
                                "utilization": 92,
                                "memory_used_mib": 14000,
                                "memory_total_mib": 24576,
                            },
                        ],
                    }
                ),
            ]
        ),
    ),
]


def telemetry_answer() -> dict[str, Any]:
    """``GET /jobs/{id}/telemetry`` over :data:`PARTS` (with the API's read counters)."""
    return {
        **assemble(PARTS).model_dump(mode="json"),
        "job_id": JOB_ID,
        "parts": 2,
        "parts_read": 2,
        "bytes_read": 900,
    }


def interrupted_then_training(record_sample_age: float = 60.0) -> Job:
    first = attempt(
        1,
        ended_at=at(300).isoformat(),
        end_reason="interrupted",
        gpu=sample(390, (95, 12000, None), (96, 23800, None)).model_dump(mode="json"),
        gpu_memory_high=GpuMemoryHigh(at=at(390), node=0, gpu=1, percent=96.8).model_dump(mode="json"),
    )
    second = attempt(
        2, gpu=sample(record_sample_age, (97, 16000, 300.0), (3, 22000, 0.0)).model_dump(mode="json")
    )
    return job(first, second)


class FakeClient:
    """The API: one job view, and its telemetry (or the error the API answers for it)."""

    def __init__(self, job_view: dict[str, Any], telemetry: dict[str, Any] | ApiError):
        self.job_id = JOB_ID
        self.job_view = job_view
        self.answer = telemetry
        self.telemetry_reads = 0

    def get_job(self, job_id: str) -> dict[str, Any]:
        assert job_id == self.job_id
        return self.job_view

    def telemetry(self, job_id: str) -> dict[str, Any]:
        assert job_id == self.job_id
        self.telemetry_reads += 1
        if isinstance(self.answer, ApiError):
            raise self.answer
        return self.answer


def status(monkeypatch: pytest.MonkeyPatch, client: FakeClient, *flags: str, job_id: str = JOB_ID) -> Any:
    monkeypatch.setattr(cli_jobs, "api_client", lambda target: contextlib.nullcontext(client))
    monkeypatch.setattr(cli_jobs, "utc_now", lambda: NOW)
    monkeypatch.setenv("COLUMNS", "220")
    result = runner.invoke(app, ["status", job_id, *flags])
    assert result.exit_code == 0, result.output + result.stderr
    return result


def cells(row: str) -> list[str]:
    """A table row's cells (columns are two spaces apart or more)."""
    return re.split(r"\s{2,}", row.strip())


# ------------------------------------------------------------------------------------------------- status


def test_status_shows_each_gpus_latest_reading_memory_warnings_and_the_latest_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a training job whose first attempt ran out of GPU memory, whose record holds a 60 s old sample of
    # its second attempt, and whose telemetry holds a newer one (5 s old) and the metrics at step 120
    client = FakeClient(view(interrupted_then_training(record_sample_age=60)), telemetry_answer())

    # When `spotrun status` shows it
    lines = status(monkeypatch, client).stdout.splitlines()
    text = "\n".join(lines)

    # Then the GPU table of attempt 2 shows each GPU's utilization, memory and PCIe from the newer sample
    assert "GPU health (attempt 2)" in text
    row0 = next(line for line in lines if line.split()[:3] == ["0", "i-00000000000000002", "0"])
    row1 = next(line for line in lines if line.split()[:3] == ["0", "i-00000000000000002", "1"])
    assert cells(row0)[3:] == ["91 %", "61.0 %", "420 / 64", f"{at(5):%H:%M:%S} (5 s ago)"]
    assert cells(row1)[3:] == ["92 %", "57.0 %", "-", f"{at(5):%H:%M:%S} (5 s ago)"]
    # And the first attempt's memory above 90 % is flagged, from the record
    assert "GPU memory above 90 %: attempt 1 node 0 GPU 1 at 96.8 % (11:53:30 UTC)" in text
    # And the latest value of each metric with its step
    loss = next(line for line in lines if line.split()[:1] == ["loss"])
    accuracy = next(line for line in lines if line.split()[:1] == ["accuracy"])
    assert loss.split()[:4] == ["loss", "0.4123", "120", "2"]
    assert accuracy.split()[:4] == ["accuracy", "0.88", "120", "2"]
    # And the health comes before the status line, which stays last
    assert text.index("GPU health") < text.index("status: TRAINING")
    assert lines[-1].startswith("status: TRAINING")


def test_the_records_sample_is_shown_when_it_is_the_newer_with_memory_in_gib_and_its_high_gpu_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a record whose sample (1 s old) is newer than the telemetry's, GPU 1 at 22000 of 24576 MiB (89.5 %)...
    fresh = interrupted_then_training(record_sample_age=1)
    # ...then at 23000 MiB (93.6 %)
    second = fresh.attempts[1].model_copy(update={"gpu": sample(1, (97, 16000, 300.0), (3, 23000, 0.0))})
    fresh = fresh.model_copy(update={"attempts": [fresh.attempts[0], second]})
    client = FakeClient(view(fresh), telemetry_answer())

    # When `spotrun status` shows it
    lines = status(monkeypatch, client).stdout.splitlines()

    # Then its rows come from the record: memory with GiB, the fuller GPU flagged HIGH, PCIe where measured
    row0 = next(line for line in lines if line.split()[:3] == ["0", "i-00000000000000002", "0"])
    row1 = next(line for line in lines if line.split()[:3] == ["0", "i-00000000000000002", "1"])
    assert cells(row0)[3:6] == ["97 %", "65.1 % (15.6 of 24.0 GiB)", "300 / 30"]
    assert cells(row1)[3:6] == ["3 %", "93.6 % (22.5 of 24.0 GiB) HIGH", "0 / 0"]


def test_status_json_carries_the_gpu_health_the_warnings_and_the_latest_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the same job
    client = FakeClient(view(interrupted_then_training(record_sample_age=60)), telemetry_answer())

    # When `spotrun status --json` prints it
    answer = json.loads(status(monkeypatch, client, "--json").stdout)

    # Then the view is there whole, with each node's latest sample, the warnings and the metrics beside it
    assert answer["job_id"] == JOB_ID
    assert answer["attempts"][1]["gpu"]["gpus"][0]["utilization"] == 97
    [node] = answer["gpu_health"]
    assert (node["attempt"], node["node"], node["instance_id"], node["source"]) == (
        2,
        0,
        "i-00000000000000002",
        "telemetry",
    )
    assert [(g["index"], g["utilization"], g["memory_percent"], g["memory_high"]) for g in node["gpus"]] == [
        (0, 91, 61.0, False),
        (1, 92, 57.0, False),
    ]
    assert node["gpus"][0]["pcie_rx_mib_s"] == 420
    assert answer["gpu_memory_warnings"] == [
        {"attempt": 1, "node": 0, "gpu": 1, "percent": 96.8, "at": at(390).isoformat()}
    ]
    assert answer["latest_metrics"]["loss"] == {
        "value": 0.41234,
        "step": 120,
        "attempt": 2,
        "node": 0,
        "at": at(10).isoformat(),
    }
    assert "telemetry_error" not in answer


def test_without_its_telemetry_status_shows_the_records_sample_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a deployment whose API has no telemetry route (an older stack)
    client = FakeClient(view(interrupted_then_training()), ApiError(404, "Not found"))

    # When `spotrun status` (and --json) shows the job
    text = status(monkeypatch, client).stdout
    answer = json.loads(status(monkeypatch, client, "--json").stdout)

    # Then the GPUs come from the record, no metric is shown, and the reason is said
    assert "GPU health (attempt 2)" in text
    assert "latest metrics" not in text
    assert "telemetry unavailable: Not found" in text
    assert answer["gpu_health"][0]["source"] == "record"
    assert answer["latest_metrics"] == {}
    assert answer["telemetry_error"] == "telemetry unavailable: Not found"


def test_a_job_without_samples_or_telemetry_shows_no_gpu_section(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a job still acquiring capacity, whose telemetry is empty
    waiting = job(status=JobStatus.ACQUIRING)
    client = FakeClient(view(waiting), {**JobTelemetry().model_dump(mode="json"), "job_id": JOB_ID})
    # When shown, then nothing about GPUs or metrics is made up
    text = status(monkeypatch, client).stdout
    assert "GPU" not in text
    assert "metrics" not in text


def test_memory_above_90_percent_is_flagged_from_the_telemetry_when_the_record_missed_it() -> None:
    # Given a record without flags (its samples are refreshed every few minutes) and the telemetry's readings
    plain = job(attempt(1, ended_at=at(300).isoformat(), end_reason="interrupted"), attempt(2))
    telemetry = assemble(PARTS)
    # When the warnings are gathered, then attempt 1's first reading above 90 % is one
    [flag] = memory_high_flags(plain, telemetry)
    assert (flag.attempt, flag.node, flag.gpu, flag.percent, flag.at) == (1, 0, 1, 96.8, at(390))


def test_a_groups_nodes_each_show_their_own_sample() -> None:
    # Given a two-node attempt whose nodes each hold a sample in the record
    nodes = [
        NodeRun(node=0, instance_id="i-0a", started_at=at(100), gpu=sample(4, (90, 1000, None))),
        NodeRun(node=1, instance_id="i-0b", started_at=at(100), gpu=sample(3, (0, 24000, None))),
    ]
    group = job(attempt(1, nodes=[n.model_dump(mode="json") for n in nodes]))
    # When the latest samples are read, then one per node, in node order, node 1's memory high
    found = latest_node_gpus(group, None)
    assert [(n.node, n.instance_id, n.gpus[0].utilization, n.gpus[0].memory_high) for n in found] == [
        (0, "i-0a", 90, False),
        (1, "i-0b", 0, True),
    ]


# ---------------------------------------------------------------------------------------------- live view


def test_the_live_view_shows_a_line_per_node_the_warnings_and_the_latest_metrics_above_the_status() -> None:
    # Given a running job's view and its telemetry
    current = interrupted_then_training(record_sample_age=60)
    telemetry = assemble(PARTS)

    # When the live view is drawn
    console = Console(record=True, width=200)
    console.print(live_view(view(current), ["step 120 loss 0.41"], live_parts(current, telemetry)))
    lines = console.export_text().splitlines()

    # Then under the log tail: node 0's GPUs, the memory warning, the metrics at step 120, then the status line
    assert lines[0] == "--- log tail ---"
    assert lines[2] == f"GPUs node 0 ({at(5):%H:%M:%S}): #0 91 % mem 61.0 %, #1 92 % mem 57.0 %"
    assert lines[3].startswith("GPU memory above 90 %: attempt 1 node 0 GPU 1 at 96.8 %")
    assert lines[4] == "metrics at step 120: accuracy 0.88, loss 0.4123"
    assert lines[5].startswith(f"job {JOB_ID}: TRAINING")


def test_a_high_gpu_reads_high_in_the_live_view() -> None:
    # Given a node whose GPU 1 holds 95 % of its memory
    current = job(attempt(1, gpu=sample(2, (97, 1000, None), (97, 23347, None)).model_dump(mode="json")))
    # When its live lines are drawn (no warning recorded yet), then GPU 1 is flagged on the node's line
    [node_line] = live_parts(current, None)
    assert node_line.plain == f"GPUs node 0 ({at(2):%H:%M:%S}): #0 97 % mem 4.1 %, #1 97 % mem 95.0 % HIGH"
    assert [span.style for span in node_line.spans] == ["bold red"]


def test_the_live_view_reads_the_telemetry_at_most_every_few_seconds_and_keeps_the_last_on_failure() -> None:
    # Given a client whose telemetry answers, and a clock the test moves
    client = FakeClient(view(interrupted_then_training()), telemetry_answer())
    clock = [0.0]
    poll = TelemetryPoll(client, JOB_ID, every=5.0, clock=lambda: clock[0])

    # When the view polls every second for 12 s, the API failing after the first read
    read = [poll.poll()]
    client.answer = ApiError(503, "Service Unavailable")
    for second in range(1, 13):
        clock[0] = float(second)
        read.append(poll.poll())

    # Then the telemetry was read at 0, 5 and 10 s only, and the first answer stayed shown through the failures
    assert client.telemetry_reads == 3
    assert all(r is not None and "loss" in r.metrics for r in read)


# ------------------------------------------------------------------------------------------ recorded answers

RECORDED = Path(__file__).resolve().parent / "recorded"


def test_status_reads_a_recorded_emulator_job_and_its_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the API's answers recorded in the emulator: a job training on a g4dn.xlarge (one T4), whose script
    # reported loss and accuracy each step, and whose GPU memory was driven to 95 % (LocalRuntime.set_gpu)
    recorded_view = json.loads((RECORDED / "gpu_job_view.json").read_text())
    recorded_telemetry = json.loads((RECORDED / "gpu_job_telemetry.json").read_text())
    client = FakeClient(recorded_view, recorded_telemetry)
    client.job_id = recorded_view["job_id"]

    # When `spotrun status` shows it, and --json prints it
    text = status(monkeypatch, client, job_id=client.job_id).stdout
    answer = json.loads(status(monkeypatch, client, "--json", job_id=client.job_id).stdout)

    # Then its GPU reads 94 % with its memory flagged HIGH (the telemetry's sample, newer than the record's), the
    # record's first reading above 90 % is warned, and the metrics are those of the last step reported (158)
    row = next(line for line in text.splitlines() if line.split()[:3] == ["0", "i-ddea833c17a226645", "0"])
    assert cells(row)[3:6] == ["94 %", "95.0 % HIGH", "438 / 133"]
    assert "GPU memory above 90 %: attempt 1 node 0 GPU 0 at 95.0 % (23:00:50 UTC)" in text
    assert [
        line.split()[:3] for line in text.splitlines() if line.split()[:1] in (["loss"], ["accuracy"])
    ] == [
        ["accuracy", "0.9937", "158"],
        ["loss", "0.006329", "158"],
    ]
    assert answer["gpu_health"][0]["source"] == "telemetry"
    assert answer["gpu_memory_warnings"][0]["percent"] == 95.0
    assert answer["latest_metrics"]["loss"]["step"] == 158
