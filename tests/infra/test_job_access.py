"""The job-access role in the template, intersected with a job's session policy: each job reaches only itself.

The effective permissions of a session are the intersection of the role's policy and the session policy
(https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session): these tests evaluate
both, offline, the synthesized role's statements and the policy the API function passes to STS.
"""

from __future__ import annotations

from typing import Any

import pytest

from spotrun.model.agent_protocol.session_policy import SESSION_SECONDS, job_session_policy
from spotrun.model.layout import agent_command_key, commit_marker_key, log_key
from spotrun.model.manifest.schema import JobManifest
from tests.infra.conftest import Synthesized, get_att
from tests.infra.policy_eval import allowed, allowed_by_all, role_statements
from tests.infra.test_agent_reports import function_role
from tests.infra.test_storage_and_network import actions_of, statements_of

JOB = "tiny-0123456789ab"
OTHER = "tiny-ba9876543210"


def job_access_role(synthesized: Synthesized) -> str:
    (role_id,) = [key for key in synthesized.resources("AWS::IAM::Role") if key.startswith("JobAccessRole")]
    return role_id


def jobs_bucket(synthesized: Synthesized) -> str:
    return synthesized.marked("bucket")["jobs"]


def objects(synthesized: Synthesized, key: str = "") -> str:
    # The template's flattened form of the bucket's ARN (tests.infra.policy_eval.flat).
    arn = f"<{jobs_bucket(synthesized)}.Arn>"
    return f"{arn}/{key}" if key else arn


def session(synthesized: Synthesized, **training: Any) -> list[dict[str, Any]]:
    """The session policy of JOB's attempt 1, its ARNs in the template's flattened form."""
    manifest = JobManifest.model_validate(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "training": {
                "command": ["python", "train.py"],
                "code": "s3://placeholder/examples/code/",
                **training,
            },
        }
    )
    policy = job_session_policy(JOB, 1, manifest, jobs_bucket="placeholder")
    statements: list[dict[str, Any]] = renamed(
        policy["Statement"], "arn:aws:s3:::placeholder", objects(synthesized)
    )
    return statements


def renamed(value: Any, old: str, new: str) -> Any:
    """``value`` with ``old`` replaced by ``new`` in every string."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [renamed(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: renamed(item, old, new) for key, item in value.items()}
    return value


def test_only_the_agent_api_function_may_assume_the_role_for_an_hour_at_most(
    synthesized: Synthesized,
) -> None:
    # Given the job-access role and the role of the function that serves the agents' credentials route
    role = synthesized.properties(job_access_role(synthesized))
    api_role = function_role(synthesized, "agent_api")

    # Then its trust policy names that function's role alone
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Effect"] == "Allow"
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Principal"] == {"AWS": get_att(api_role)}
    assert role["MaxSessionDuration"] == SESSION_SECONDS
    # and that function may assume it, and no other role
    assumes = [s for s in statements_of(synthesized, api_role) if "sts:AssumeRole" in actions_of(s)]
    assert [s["Resource"] for s in assumes] == [get_att(job_access_role(synthesized))]
    # and the users' API function may assume no role at all
    users = statements_of(synthesized, function_role(synthesized, "api"))
    assert [s for s in users if "sts:AssumeRole" in actions_of(s)] == []


@pytest.mark.parametrize(
    ("action", "key"),
    [
        ("s3:GetObject", agent_command_key(OTHER, 1, "train")),
        ("s3:GetObject", f"jobs/{OTHER}/output/model.npy"),
        ("s3:PutObject", commit_marker_key(OTHER, 100)),
        ("s3:PutObject", agent_command_key(OTHER, 1, "train")),
        ("s3:DeleteObject", commit_marker_key(OTHER, 100)),
        ("s3:PutObject", agent_command_key(JOB, 1, "train")),  # its own command: the control plane's
        ("s3:GetObject", "manifests/other.yaml"),
    ],
)
def test_another_jobs_objects_and_any_command_document_are_denied(
    synthesized: Synthesized, action: str, key: str
) -> None:
    # Given the role's statements and a job's session policy
    role = role_statements(synthesized, job_access_role(synthesized))

    # Then the role alone allows what the intersection denies: the session is what keeps the jobs apart
    assert allowed(role, action, objects(synthesized, key))
    assert not allowed_by_all([role, session(synthesized)], action, objects(synthesized, key))


def test_another_jobs_prefix_is_not_listed(synthesized: Synthesized) -> None:
    # Given the role's statements and a job's session policy
    policies = [role_statements(synthesized, job_access_role(synthesized)), session(synthesized)]
    bucket = objects(synthesized)

    # Then its own prefix is listed, another job's or jobs/ itself is not
    assert allowed_by_all(policies, "s3:ListBucket", bucket, {"s3:prefix": f"jobs/{JOB}/checkpoints/"})
    assert not allowed_by_all(policies, "s3:ListBucket", bucket, {"s3:prefix": f"jobs/{OTHER}/"})
    assert not allowed_by_all(policies, "s3:ListBucket", bucket, {"s3:prefix": "jobs/"})


@pytest.mark.parametrize(
    ("action", "key"),
    [
        ("s3:GetObject", agent_command_key(JOB, 1, "train")),
        ("s3:GetObject", "examples/code/train.py"),
        ("s3:PutObject", commit_marker_key(JOB, 100)),
        ("s3:DeleteObject", commit_marker_key(JOB, 100)),
        ("s3:PutObject", f"jobs/{JOB}/output/model.npy"),
        ("s3:PutObject", log_key(JOB, 1)),
    ],
)
def test_the_jobs_own_actions_are_allowed(synthesized: Synthesized, action: str, key: str) -> None:
    # Given the role's statements and a job's session policy
    policies = [role_statements(synthesized, job_access_role(synthesized)), session(synthesized)]

    # Then the job's own reads, writes and prunes pass both
    assert allowed_by_all(policies, action, objects(synthesized, key))


def test_the_role_cannot_delete_what_is_not_a_checkpoint(synthesized: Synthesized) -> None:
    # Given the role's statements alone (the ceiling)
    role = role_statements(synthesized, job_access_role(synthesized))

    # Then it deletes checkpoints and nothing else, and writes nothing outside jobs/
    assert allowed(role, "s3:DeleteObject", objects(synthesized, commit_marker_key(JOB, 1)))
    assert not allowed(role, "s3:DeleteObject", objects(synthesized, f"jobs/{JOB}/output/model.npy"))
    assert not allowed(role, "s3:PutObject", objects(synthesized, "manifests/x.yaml"))
