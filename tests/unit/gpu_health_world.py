"""Hand-built records for the GPU health tests: a job interrupted once (attempt 1 out of GPU memory), training
again, the telemetry its agents put, and an API that answers them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from spotrun.cli.client import ApiError
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.gpu_health import GpuMemoryHigh
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.model.job.telemetry import GpuLine, assemble

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
JOB_ID = "tiny-000000000001"


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
