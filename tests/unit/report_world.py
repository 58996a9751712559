"""Hand-built records for the report's tests: a job interrupted four times across three zones, with its telemetry.

The record is what the control plane writes (attempts, nodes, the timeline), laid out by hand so that every
figure the report shows can be checked against a number written here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spotrun.model.capacity.pricing import job_cost
from spotrun.model.job.attempt import Attempt, NodeRun
from spotrun.model.job.gpu_health import GpuMemoryHigh
from spotrun.model.job.record import Job, JobStatus, ManifestSource, StatusChange
from spotrun.model.job.telemetry import GpuPoint, JobTelemetry, MetricPoint

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
JOB_ID = "bert-finetune-0123456789ab"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
# attempt -> (type, zone, price, start, end, end reason, restored step, last step, steps lost, warned)
ATTEMPTS = [
    (1, "g5.xlarge", "us-east-1a", 0.45, 2, 95, "interrupted", None, 1200, 0, True),
    (2, "g5.xlarge", "us-east-1b", 0.43, 96, 180, "interrupted", 1200, 2300, 0, True),
    (3, "g6.xlarge", "us-east-1c", 0.39, 183, 250, "instance-lost", 2300, 3100, 100, False),
    (4, "g5.xlarge", "us-east-1b", 0.44, 253, 300, "hung", 3000, 3400, 150, False),
    (5, "g5.xlarge", "us-east-1a", 0.47, 303, 420, "completed", 3250, 5000, None, False),
]


def at(minutes: float) -> datetime:
    """``minutes`` after the job's submission."""
    return T0 + timedelta(minutes=minutes)


def attempt(number: int) -> Attempt:
    """The attempt ``number`` of :data:`ATTEMPTS` as the record holds it."""
    _, kind, zone, price, start, end, reason, restored, last, lost, warned = ATTEMPTS[number - 1]
    return Attempt(
        number=number,
        instance_id=f"i-{number:017x}",
        instance_type=kind,
        availability_zone=zone,
        lifecycle="spot",
        price_per_hour=price,
        price_source="spot-price-history",
        started_at=at(start),
        ended_at=at(end),
        end_reason=reason,
        checkpoint_restored=None if restored is None else f"jobs/{JOB_ID}/checkpoints/step-{restored:012d}/",
        restored_step=restored,
        last_step=last,
        steps_lost=lost,
        steps_lost_basis=None if lost is None else "restored",
        rebalance_at=at(end - 3) if warned else None,
        notice_at=at(end - 2) if warned else None,
        notice_checkpoint_committed=True if warned else None,
        running_at=at(start + 1),
        gpu_memory_high=(
            GpuMemoryHigh(at=at(start + 20), node=0, gpu=0, percent=93.5) if number == 3 else None
        ),
    )


def timeline() -> list[StatusChange]:
    """SUBMITTED, then for each attempt ACQUIRING, BOOTING, STAGING, TRAINING and its end; ARCHIVING, SUCCEEDED."""
    changes = [StatusChange(status=JobStatus.SUBMITTED, at=T0)]
    for number, kind, zone, _, start, end, reason, *_ in ATTEMPTS:
        acquiring = 0 if number == 1 else ATTEMPTS[number - 2][5]  # right after the previous attempt ended
        changes += [
            StatusChange(status=JobStatus.ACQUIRING, at=at(max(acquiring, 1))),
            StatusChange(status=JobStatus.BOOTING, at=at(start), detail=f"{kind} in {zone}"),
            StatusChange(status=JobStatus.STAGING, at=at(start + 4)),
            StatusChange(status=JobStatus.TRAINING, at=at(start + 6)),
        ]
        if reason != "completed":
            changes.append(StatusChange(status=JobStatus.INTERRUPTED, at=at(end), detail=reason))
    changes += [
        StatusChange(status=JobStatus.ARCHIVING, at=at(420)),
        StatusChange(status=JobStatus.SUCCEEDED, at=at(425)),
    ]
    return changes


def interrupted_job() -> Job:
    """A job interrupted four times (two warned reclaims, a loss without warning, a hang) across three zones."""
    attempts = [attempt(n) for n in range(1, 6)]
    # Attempt 2's instance was launched on attempt 1's warning (minute 93), before the job moved to it (minute 96).
    attempts[1] = attempts[1].model_copy(update={"started_at": at(93)})
    job = Job(
        job_id=JOB_ID,
        name="bert-finetune",
        status=JobStatus.SUCCEEDED,
        source=ManifestSource(kind="api"),
        created_at=T0,
        updated_at=at(425),
        timeline=timeline(),
        attempts=attempts,
    )
    return job.model_copy(update={"cost": job_cost(job.billed_instances(), now=at(425))})


def running_job(now_minutes: float = 200) -> Job:
    """The same job while attempt 3 trains (``now_minutes`` after submission): no end, no final cost."""
    job = interrupted_job()
    third = job.attempts[2].model_copy(
        update={"ended_at": None, "end_reason": None, "last_step": None, "steps_lost": None}
    )
    kept = [c for c in job.timeline if c.at <= at(189)]
    return job.model_copy(
        update={
            "status": JobStatus.TRAINING,
            "attempts": [*job.attempts[:2], third],
            "timeline": kept,
            "cost": None,
            "updated_at": at(now_minutes),
        }
    )


def group_job() -> Job:
    """A two-node job: node 1 of attempt 1 is reclaimed, node 0 is kept into attempt 2 beside a new node."""
    first = Attempt(
        number=1,
        instance_id="i-00000000000000a00",
        instance_type="g5.12xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=2.1,
        started_at=at(1),
        ended_at=at(60),
        end_reason="interrupted",
        last_step=900,
        steps_lost=0,
        nodes=[
            NodeRun(
                node=0,
                instance_id="i-00000000000000a00",
                started_at=at(1),
                ended_at=at(60),
                end_reason="kept",
            ),
            NodeRun(
                node=1,
                instance_id="i-00000000000000a01",
                started_at=at(1),
                ended_at=at(60),
                end_reason="interrupted",
                notice_at=at(58),
            ),
        ],
    )
    second = first.model_copy(
        update={
            "number": 2,
            "started_at": at(60),
            "ended_at": at(120),
            "end_reason": "completed",
            "restored_step": 900,
            "last_step": 2000,
            "steps_lost": None,
            "nodes": [
                NodeRun(
                    node=0,
                    instance_id="i-00000000000000a00",
                    started_at=at(60),
                    ended_at=at(120),
                    end_reason="completed",
                    kept_from=1,
                ),
                NodeRun(
                    node=1,
                    instance_id="i-00000000000000a02",
                    started_at=at(60),
                    ended_at=at(120),
                    end_reason="completed",
                ),
            ],
        }
    )
    changes = [
        StatusChange(status=JobStatus.SUBMITTED, at=T0),
        StatusChange(status=JobStatus.ACQUIRING, at=at(0.5)),
        StatusChange(status=JobStatus.BOOTING, at=at(1)),
        StatusChange(status=JobStatus.STAGING, at=at(4)),
        StatusChange(status=JobStatus.TRAINING, at=at(6)),
        StatusChange(status=JobStatus.INTERRUPTED, at=at(60)),
        StatusChange(status=JobStatus.ACQUIRING, at=at(60)),
        StatusChange(status=JobStatus.BOOTING, at=at(60)),
        StatusChange(status=JobStatus.STAGING, at=at(63)),
        StatusChange(status=JobStatus.TRAINING, at=at(65)),
        StatusChange(status=JobStatus.ARCHIVING, at=at(120)),
        StatusChange(status=JobStatus.SUCCEEDED, at=at(122)),
    ]
    return Job(
        job_id="ddp-0123456789ab",
        name="ddp",
        status=JobStatus.SUCCEEDED,
        source=ManifestSource(kind="api"),
        created_at=T0,
        updated_at=at(122),
        timeline=changes,
        attempts=[first, second],
    )


def telemetry() -> JobTelemetry:
    """A loss falling over each attempt's steps, and one GPU's readings every ten minutes while it trained."""
    losses: list[MetricPoint] = []
    gpus: list[GpuPoint] = []
    for number, _, _, _, start, end, _, restored, last, _, _ in ATTEMPTS:
        first = restored or 0
        for index in range(5):
            step = first + (last - first) * index // 4
            minute = start + 6 + (end - start - 6) * index / 4
            losses.append(
                MetricPoint(
                    at=at(minute), attempt=number, node=0, step=step, value=round(2.0 / (1 + step / 500), 4)
                )
            )
        for minute in range(start + 6, end, 10):
            memory = 93.5 if number == 3 else 71.0
            gpus.append(
                GpuPoint(
                    at=at(minute), attempt=number, node=0, gpu=0, utilization=96.0, memory_percent=memory
                )
            )
    return JobTelemetry(metrics={"loss": losses}, gpu=gpus)
