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


def group(synthesized: Synthesized) -> str:
    """The training log group's ARN (CreateLogStream's resource), flattened as the template's are."""
    name = flat(training_logs(synthesized)["LogGroupName"])
    return f"arn:<AWS::Partition>:logs:{REGION_ACCOUNT}:log-group:{name}"


def stream(synthesized: Synthesized, name: str) -> str:
    """A stream's ARN of the deployment's training log group, flattened as the template's are."""
    return f"{group(synthesized)}:log-stream:{name}"


def test_the_log_group_is_named_after_the_jobs_bucket_and_expires(synthesized: Synthesized) -> None:
    # Given the template's training log group
    found = training_logs(synthesized)

    # Then it is /spotrun/<jobs bucket>, as the agent and the API name it, kept the shape's days
    assert flat(found["LogGroupName"]) == f"/spotrun/<{jobs_bucket(synthesized)}>"
    assert found["RetentionInDays"] == LOG_RETENTION_DAYS


def test_a_job_writes_its_own_attempts_stream_and_no_other(synthesized: Synthesized) -> None:
    # Given the role's statements and the session policy of JOB's attempt 1, named in the template's terms
    own = renamed(session(synthesized), "arn:aws:logs:", "arn:<AWS::Partition>:logs:")
    policies = [role_statements(synthesized, job_access_role(synthesized)), own]

    # Then its own stream is written, another job's or attempt's is not
    write = "logs:PutLogEvents"
    assert allowed_by_all(policies, write, stream(synthesized, f"{JOB}/attempt-001"))
    assert not allowed_by_all(policies, write, stream(synthesized, f"{OTHER}/attempt-001"))
    assert not allowed_by_all(policies, write, stream(synthesized, f"{JOB}/attempt-002"))
    # the session names the stream in any group: the role's ceiling keeps it to the deployment's
    elsewhere = (
        f"arn:<AWS::Partition>:logs:{REGION_ACCOUNT}:log-group:/aws/other:log-stream:{JOB}/attempt-001"
    )
    assert not allowed_by_all(policies, write, elsewhere)
    # and it creates no stream (judged on the group): the control plane does
    assert not allowed_by_all(policies, "logs:CreateLogStream", group(synthesized))


def test_the_api_reads_the_training_streams_and_neither_opens_nor_writes_them(
    synthesized: Synthesized,
) -> None:
    # Given the users' API function's statements
    api = role_statements(synthesized, function_role(synthesized, "api"))

    # Then it reads any job's stream of the group (GET /jobs/{id}/logs), and creates or writes none
    assert allowed(api, "logs:GetLogEvents", stream(synthesized, f"{JOB}/attempt-001"))
    assert not allowed(api, "logs:CreateLogStream", group(synthesized))
    assert not allowed(api, "logs:CreateLogStream", f"{group(synthesized)}:*")
    assert not allowed(api, "logs:PutLogEvents", stream(synthesized, f"{JOB}/attempt-001"))
    other_group = f"arn:<AWS::Partition>:logs:{REGION_ACCOUNT}:log-group:/aws/other"
    assert not allowed(api, "logs:GetLogEvents", f"{other_group}:log-stream:x")


def test_the_agent_api_opens_the_training_streams_and_neither_reads_nor_writes_them(
    synthesized: Synthesized,
) -> None:
    # Given the agents' API function's statements (it issues the job's credentials, which may write the stream)
    agent_api = role_statements(synthesized, function_role(synthesized, "agent_api"))

    # Then it creates streams in the group (either ARN form), in no other group, and reads or writes none
    assert allowed(agent_api, "logs:CreateLogStream", group(synthesized))
    assert allowed(agent_api, "logs:CreateLogStream", f"{group(synthesized)}:*")
    other_group = f"arn:<AWS::Partition>:logs:{REGION_ACCOUNT}:log-group:/aws/other"
    assert not allowed(agent_api, "logs:CreateLogStream", other_group)
    assert not allowed(agent_api, "logs:GetLogEvents", stream(synthesized, f"{JOB}/attempt-001"))
    assert not allowed(agent_api, "logs:PutLogEvents", stream(synthesized, f"{JOB}/attempt-001"))
