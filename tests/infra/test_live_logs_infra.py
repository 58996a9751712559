"""The live training logs in the template: the log group, the job's writes to its own stream, the API's reads."""

from __future__ import annotations

from typing import Any

from spotrun.shape import LOG_RETENTION_DAYS
from tests.infra.conftest import Synthesized
from tests.infra.policy_eval import allowed, allowed_by_all, flat, role_statements
from tests.infra.test_agent_reports import function_role
from tests.infra.test_job_access import JOB, OTHER, job_access_role, jobs_bucket, renamed, session

REGION_ACCOUNT = "<AWS::Region>:<AWS::AccountId>"


def training_logs(synthesized: Synthesized) -> dict[str, Any]:
    (group,) = [
        properties["Properties"]
        for key, properties in synthesized.resources("AWS::Logs::LogGroup").items()
        if key.startswith("TrainingLogs")
    ]
    return group


def stream(synthesized: Synthesized, name: str) -> str:
    """A stream's ARN of the deployment's training log group, flattened as the template's are."""
    group = flat(training_logs(synthesized)["LogGroupName"])
    return f"arn:<AWS::Partition>:logs:{REGION_ACCOUNT}:log-group:{group}:log-stream:{name}"


def test_the_log_group_is_named_after_the_jobs_bucket_and_expires(synthesized: Synthesized) -> None:
    # Given the template's training log group
    group = training_logs(synthesized)

    # Then it is /spotrun/<jobs bucket>, as the agent and the API name it, kept the shape's days
    assert flat(group["LogGroupName"]) == f"/spotrun/<{jobs_bucket(synthesized)}>"
    assert group["RetentionInDays"] == LOG_RETENTION_DAYS


def test_a_job_writes_its_own_attempts_stream_and_no_other(synthesized: Synthesized) -> None:
    # Given the role's statements and the session policy of JOB's attempt 1, named in the template's terms
    own = renamed(session(synthesized), "arn:aws:logs:", "arn:<AWS::Partition>:logs:")
    policies = [role_statements(synthesized, job_access_role(synthesized)), own]

    # Then its own stream is created and written, another job's or attempt's is not
    for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
        assert allowed_by_all(policies, action, stream(synthesized, f"{JOB}/attempt-001"))
        assert not allowed_by_all(policies, action, stream(synthesized, f"{OTHER}/attempt-001"))
        assert not allowed_by_all(policies, action, stream(synthesized, f"{JOB}/attempt-002"))
        # the session names the stream in any group: the role's ceiling keeps it to the deployment's
        elsewhere = (
            f"arn:<AWS::Partition>:logs:{REGION_ACCOUNT}:log-group:/aws/other:log-stream:{JOB}/attempt-001"
        )
        assert not allowed_by_all(policies, action, elsewhere)


def test_the_api_reads_the_training_streams_and_writes_none(synthesized: Synthesized) -> None:
    # Given the API function's statements
    api = role_statements(synthesized, function_role(synthesized, "api"))

    # Then it reads any job's stream of the group, and writes none
    assert allowed(api, "logs:GetLogEvents", stream(synthesized, f"{JOB}/attempt-001"))
    assert not allowed(api, "logs:PutLogEvents", stream(synthesized, f"{JOB}/attempt-001"))
    other_group = f"arn:<AWS::Partition>:logs:{REGION_ACCOUNT}:log-group:/aws/other:log-stream:x"
    assert not allowed(api, "logs:GetLogEvents", other_group)
