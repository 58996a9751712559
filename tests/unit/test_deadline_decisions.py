"""The deadline policy in the control plane: refusal at submission, and the lifecycle of each acquisition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.submission import admission_problems, submit_api_manifest
from spotrun.model.capacity.candidates import choose_lifecycle
from spotrun.model.deadline.state import Choice, Decision
from spotrun.model.errors import CapacityUnavailable, RequestRejected
from spotrun.model.job.record import JobStatus, ManifestSource, new_job
from spotrun.model.manifest.capacity import CapacityPolicy
from spotrun.model.manifest.parse import parse_manifest_document
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCompute, FakeObjects, FakeWorkflows, InMemoryJobStore

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SUBNETS = {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}


def document(deadline: str = "36h", hours: float = 2.0) -> dict[str, Any]:
    return {
        "name": "tiny",
        "resources": {"gpu_names": ["a10g"]},
        "capacity": {"deadline": deadline},
        "training": {"command": ["python", "t.py"], "expected_hours": hours},
    }


class NoSpot(FakeCompute):
    """EC2 with on-demand capacity but no spot (every spot pool answers InsufficientInstanceCapacity)."""

    def create_fleet(self, request: dict[str, Any]) -> dict[str, Any]:
        lifecycle = request["TargetCapacitySpecification"]["DefaultTargetCapacityType"]
        self.unavailable = lifecycle == "spot"
        return super().create_fleet(request)


def lifecycles(compute: FakeCompute) -> list[str]:
    return [r["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for r in compute.fleet_requests]


def job_in(store: InMemoryJobStore, deadline: str = "36h", hours: float = 2.0) -> None:
    manifest = parse_manifest_document(document(deadline, hours))
    store.create(new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k"), manifest, T0))


def acquire(store: InMemoryJobStore, compute: FakeCompute, now: datetime = T0):
    manifest = store.get("tiny-1").require_manifest()
    return acquire_instance(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=tuple(SUBNETS),
        launch_template_name="spotrun-agent",
        timing=workflow_timing(manifest, 1.0),
        now=now,
    )


# --- admission -----------------------------------------------------------------------------------------------


def test_a_deadline_even_on_demand_cannot_meet_is_refused_with_the_numbers() -> None:
    # Given 2 h of work due in 2 h (a start and the checkpoints take longer)
    manifest = parse_manifest_document(document("2h", 2.0))
    # When the API is asked to run it
    workflows = FakeWorkflows()
    with pytest.raises(RequestRejected) as caught:
        submit_api_manifest(
            manifest,
            idempotency_key=None,
            store=InMemoryJobStore(),
            objects=FakeObjects(),
            workflows=workflows,
            state_machine_arn="arn:sm",
            time_scale=1.0,
            archive_buckets=("spotrun-archive",),
            now=T0,
        )
    # Then it is refused, saying how long on-demand would take and by how much it misses, and nothing starts
    (problem,) = caught.value.errors
    assert problem.startswith("capacity.deadline: '2h' leaves 2.00 h after submission")
    assert "takes 2.17 h" in problem
    assert "0.17 h more" in problem
    assert workflows.started == {}


def test_a_deadline_with_room_is_admitted() -> None:
    # Given 2 h of work due in 3 h, When admitted, Then no problem
    assert admission_problems(parse_manifest_document(document("3h")), archive_buckets=(), now=T0) == []


def test_an_absolute_deadline_counts_from_the_submission() -> None:
    # Given a deadline 2.5 h after T0, as an instant: room at T0, none an hour later
    manifest = parse_manifest_document(document("2026-12-01T14:30:00Z", 2.0))
    # When admitted at each time, Then only the later submission is refused
    assert admission_problems(manifest, archive_buckets=(), now=T0) == []
    (late,) = admission_problems(manifest, archive_buckets=(), now=T0 + timedelta(hours=1))
    assert "leaves 1.50 h after submission" in late


def test_the_emulator_scales_the_assumed_start() -> None:
    # Given 36 s of work due in a minute: at AWS's pace the 6-minute start alone misses it
    tight = parse_manifest_document(document("1m", 0.01))
    # When admitted at time scale 1 and at the emulator's 0.01
    # Then AWS's pace refuses it (in minutes: hours would round it away), the emulator's (a 3.6 s start) admits it
    (refused,) = admission_problems(tight, archive_buckets=(), now=T0)
    assert "leaves 1.0 min after submission" in refused
    assert "with a 0.10 h start" in refused
    assert "5.6 min more" in refused
    assert admission_problems(tight, archive_buckets=(), now=T0, time_scale=0.01) == []


# --- choose_lifecycle ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("choice", "lifecycle"), [(Choice.SPOT, "spot"), (Choice.ON_DEMAND, "on-demand")])
def test_a_decision_overrides_the_fallback_rules(choice: Choice, lifecycle: str) -> None:
    # Given a policy whose fallback rules would say the opposite
    policy = CapacityPolicy(on_demand_fallback=True, fallback_after_interruptions=0)
    # When a deadline decision is given, Then its lifecycle is the answer
    assert choose_lifecycle(policy, 0, False, decided=Decision(choice, 1.0, "why").lifecycle()) == lifecycle


def test_a_wait_is_no_lifecycle() -> None:
    with pytest.raises(ValueError, match="launches nothing"):
        Decision(Choice.WAIT, 1.0, "why").lifecycle()


# --- acquisition ---------------------------------------------------------------------------------------------


def test_with_slack_and_spot_the_job_runs_on_spot_and_says_why() -> None:
    # Given a job with 34 h of slack and spot capacity
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    job_in(store)
    # When capacity is acquired
    attempt = acquire(store, compute)
    # Then spot, with the decision and its slack in the record and in the timeline
    assert attempt.lifecycle == "spot"
    assert lifecycles(compute) == ["spot"]
    job = store.get("tiny-1")
    (decision,) = job.deadline_decisions
    assert decision.choice == "spot"
    assert decision.slack_hours == pytest.approx(36 - 0.1 - 2 / (0.5 / (0.5 + 1 / 60)))
    assert job.timeline[-1].status is JobStatus.BOOTING
    assert "deadline: spot, slack 33.83 h" in job.timeline[-1].detail


def test_with_slack_and_no_spot_the_job_waits_for_spot_past_the_patience() -> None:
    # Given a job with plenty of slack and no spot capacity
    store, compute = InMemoryJobStore(), NoSpot(zones=SUBNETS)
    job_in(store)
    # When capacity is asked for now and again after the patience of jobs without a deadline (1 h)
    for now in (T0, T0 + timedelta(hours=2)):
        with pytest.raises(CapacityUnavailable, match="deadline: wait"):
            acquire(store, compute, now)
    # Then it only ever asked for spot, recorded the wait once, and did not give up (no CapacityMaxWaitExceeded)
    assert set(lifecycles(compute)) == {"spot"}
    assert [d.choice for d in store.get("tiny-1").deadline_decisions] == ["wait"]


def test_when_the_slack_runs_out_without_spot_the_job_moves_to_on_demand() -> None:
    # Given 2 h of work due in 3 h, no spot, 49 minutes later: the slack (0.02 h) is below the safety margin (a
    # launch has nothing on spot to lose: a minute's work by the next decision, and that minute)
    store, compute = InMemoryJobStore(), NoSpot(zones=SUBNETS)
    job_in(store, "3h")
    # When capacity is acquired
    attempt = acquire(store, compute, T0 + timedelta(minutes=49))
    # Then on-demand straight away (no spot request first), the decision recorded
    assert attempt.lifecycle == "on-demand"
    assert lifecycles(compute) == ["on-demand"]
    (decision,) = store.get("tiny-1").deadline_decisions
    assert decision.choice == "on-demand"
    assert "safety margin" in decision.reason


def test_spot_found_missing_is_decided_again() -> None:
    # Given 2 h of work due in 3.2 h (slack 1.03 h: above the margin, spot wanted) and no spot; no preemption seen
    # yet, so the reserve is the margin, a return trip's two restarts and the prior's preemptions (about 0.75 h),
    # below the slack: spotrun waits
    store, compute = InMemoryJobStore(), NoSpot(zones=SUBNETS)
    job_in(store, "3.2h")
    # When capacity is acquired
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute)
    # Then it asked spot once, learnt there is none, and decided again: wait (slack above the reserve)
    assert lifecycles(compute) == ["spot"]
    assert store.get("tiny-1").deadline_decisions[-1].choice == "wait"


def test_without_a_deadline_nothing_is_decided_or_recorded() -> None:
    # Given a job without a deadline
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    manifest = parse_manifest_document({"name": "tiny", "training": {"command": ["python", "t.py"]}})
    store.create(new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k"), manifest, T0))
    # When capacity is acquired, Then spot as today, no decision, the timeline as before
    assert acquire(store, compute).lifecycle == "spot"
    job = store.get("tiny-1")
    assert job.deadline_decisions == []
    assert "deadline" not in (job.timeline[-1].detail or "")
