"""What `spotrun status` shows of a job's GPUs and training metrics: each node's latest sample (the record's or
the telemetry's, whichever is newer), GPU memory above 90 % flagged, the latest value of each metric, and --json
carrying the same. The picture itself and the live view: tests/unit/test_cli_gpu_health_live.py."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotrun.cli import jobs as cli_jobs
from spotrun.cli.app import app
from spotrun.cli.client import ApiError
from spotrun.model.job.record import JobStatus
from spotrun.model.job.telemetry import JobTelemetry
from tests.unit.gpu_health_world import (
    JOB_ID,
    NOW,
    FakeClient,
    at,
    interrupted_then_training,
    job,
    sample,
    telemetry_answer,
    view,
)

runner = CliRunner()


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
