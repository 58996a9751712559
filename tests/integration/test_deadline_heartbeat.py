"""The API's agent route decides a deadline job again at each train heartbeat: off spot when due, and back.

The decisions themselves are tested in tests/unit/test_deadline_moves.py and test_deadline_return.py; this is
their call in functions/api/agent.py (a heartbeat from the job's instance, through the real handler) and in
functions/deadline_return.py (the event the heartbeat put on the bus, as EventBridge delivers it), against moto.
"""

from __future__ import annotations

import json
from datetime import timedelta

import boto3
import pytest

from functions import acquire, agent_step, deadline_return
from functions.api import agent_app
from spotrun.aws.adapters import job_store
from spotrun.aws.settings import Settings
from spotrun.control.store import update_job
from spotrun.local.api.gateway import rest_event
from spotrun.local.server import ACCOUNT_ID
from spotrun.model.agent_protocol.api_paths import AGENT_REPORTS_PATH
from spotrun.model.job.record import Job, JobStatus, ManifestSource, new_job, utc_now
from spotrun.model.manifest.parse import parse_manifest_document
from spotrun.model.manifest.schema import JobManifest
from spotrun.model.timing import workflow_timing
from tests.integration.conftest import create_agent_document

JOB = "tiny-00000000d00e"
# 2 h of work due 3 h after submission: spot at first (slack 0.83 h, above the policy's margin).
MANIFEST = parse_manifest_document(
    {
        "name": "tiny",
        "resources": {"gpu_names": ["t4", "a10g"]},
        "capacity": {"deadline": "3h"},
        "training": {"command": ["python", "train.py"], "expected_hours": 2.0},
    }
)


@pytest.fixture
def training_on_spot(deployment: Settings, lambda_context) -> str:
    """The deadline job, acquired (on spot), staged and training through the workflow's handlers: its instance."""
    return start_on_spot(deployment, lambda_context, MANIFEST)


def start_on_spot(deployment: Settings, lambda_context, manifest: JobManifest) -> str:
    """Submit ``manifest`` as the job, acquire it (on spot), stage and train it through the handlers: its instance."""
    store = job_store(deployment.jobs_table, deployment.region)
    assert store.create(new_job(JOB, "tiny", ManifestSource(bucket="b", key="k"), manifest, utc_now()))
    create_agent_document()
    timing = workflow_timing(manifest, 1.0).model_dump()
    attempt = acquire.handler({"job_id": JOB, "timing": timing}, lambda_context)
    assert attempt["lifecycle"] == "spot"
    for step in ("stage", "train"):
        agent_step.handler(
            {"job_id": JOB, "step": step, "task_token": f"token-{step}", "timing": timing}, lambda_context
        )
    assert store.get(JOB).status is JobStatus.TRAINING
    return str(attempt["instance_id"])


def submitted_earlier(deployment: Settings, minutes: float) -> None:
    """Move the job's submission and its steps before training back by ``minutes``: that much slack used."""
    shift = timedelta(minutes=minutes)

    def earlier(current: Job) -> Job:
        timeline = [
            change
            if change.status is JobStatus.TRAINING
            else change.model_copy(update={"at": change.at - shift})
            for change in current.timeline
        ]
        return current.model_copy(update={"created_at": current.created_at - shift, "timeline": timeline})

    update_job(job_store(deployment.jobs_table, deployment.region), JOB, earlier)


def heartbeat(deployment: Settings, instance_id: str, lambda_context) -> dict:
    """POST /agent/reports: a train heartbeat signed (as API Gateway names it) by the instance's role session."""
    body = json.dumps({"job_id": JOB, "attempt": 1, "step": "train", "kind": "heartbeat"}).encode()
    identity = {
        "userArn": f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/{deployment.instance_role_name}/{instance_id}"
    }
    event = rest_event("POST", AGENT_REPORTS_PATH, "", {"Content-Type": "application/json"}, body, identity)
    return agent_app.handler(event, lambda_context)


def notices() -> list[dict]:
    return [
        command
        for command in boto3.client("ssm").list_commands()["Commands"]
        if command["Parameters"]["commandUri"][0].endswith("-notice.json")
    ]


def test_a_heartbeat_without_slack_left_moves_the_job_off_spot(deployment, training_on_spot, lambda_context):
    # Given the job training on spot, submitted 49 minutes before training began (slack 0.02 h, below the 0.03 h
    # margin of an attempt just begun: a minute's work a preemption could take, seen a minute late)
    instance_id = training_on_spot
    submitted_earlier(deployment, 49)
    # When its instance reports a train heartbeat
    answer = heartbeat(deployment, instance_id, lambda_context)
    # Then the heartbeat is taken, and the agent on that instance got the notice command
    assert answer["statusCode"] == 200, answer
    assert [command["InstanceIds"] for command in notices()] == [[instance_id]]
    # and the attempt is marked as a deadline move, with the on-demand decision on the record
    job = job_store(deployment.jobs_table, deployment.region).get(JOB)
    assert job.current_attempt.deadline_move
    assert job.current_attempt.notice_at is not None
    assert [decision.choice for decision in job.deadline_decisions] == ["spot", "on-demand"]


def test_a_heartbeat_with_slack_plenty_sends_nothing(deployment, training_on_spot, lambda_context):
    # Given the job training on spot just after its submission (slack 0.83 h)
    instance_id = training_on_spot
    # When its instance reports a train heartbeat
    answer = heartbeat(deployment, instance_id, lambda_context)
    # Then the heartbeat is taken, no notice is sent, and the attempt stays on spot unmarked
    assert answer["statusCode"] == 200, answer
    assert notices() == []
    job = job_store(deployment.jobs_table, deployment.region).get(JOB)
    assert not job.current_attempt.deadline_move
    assert job.current_attempt.notice_at is None
    assert [decision.choice for decision in job.deadline_decisions] == ["spot"]


def test_on_demand_a_heartbeat_asks_for_spot_on_the_bus_and_the_return_function_moves_the_job(
    deployment, training_on_spot, lambda_context, published
):
    # Given the job training on on-demand (its attempt's lifecycle), its slack enough for a return (0.93 h)
    instance_id = training_on_spot
    store = job_store(deployment.jobs_table, deployment.region)

    def on_demand(current: Job) -> Job:
        attempt = current.current_attempt
        assert attempt is not None
        return current.with_current_attempt(attempt.model_copy(update={"lifecycle": "on-demand"}))

    update_job(store, JOB, on_demand)
    # When its instance reports a train heartbeat
    answer = heartbeat(deployment, instance_id, lambda_context)
    # Then the heartbeat is taken and the return to spot is asked for on the deployment's bus, nothing sent yet
    assert answer["statusCode"] == 200, answer
    (event,) = [e for e in published() if e["detail-type"] == "Spotrun Deadline Return To Spot"]
    # moto's delivery to SQS drops the envelope's account, which every EventBridge event carries
    # (https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html)
    event.setdefault("account", ACCOUNT_ID)
    assert event["detail"] == {"job_id": JOB, "attempt": 1}
    assert notices() == []
    # and when EventBridge delivers that event to the deadline_return function, twice (at least once)
    outcomes = [deadline_return.handler(event, lambda_context) for _ in range(2)]
    # Then the first launched a spot standby and moved the job (the agent got its notice); the second did nothing
    assert [outcome["moved"] for outcome in outcomes] == [True, False]
    job = store.get(JOB)
    assert job.standby is not None
    assert job.standby.lifecycle == "spot"
    assert job.current_attempt.deadline_move
    # (moto lists every instance in a command sent without Targets: the standby's id is there too)
    (notice,) = notices()
    assert instance_id in notice["InstanceIds"]
