"""The deployment's ``secret_references`` in the template: the job-access role reads exactly them (each session only
its job's own), the instance role is denied their parameters, and the submitting functions know them.

One synth with the option set (cdk-nag runs inside it: a finding without its acknowledgment fails here).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.app import build_app
from infra.options import OptionError, StackOptions
from spotrun.model.agent_protocol.session_policy import job_session_policy
from spotrun.model.manifest.schema import JobManifest
from tests.infra.conftest import Synthesized
from tests.infra.policy_eval import allowed, allowed_by_all, role_statements

SECRETS = "arn:aws:secretsmanager:us-east-1:123456789012:secret:training/*"
PARAMETERS = "arn:aws:ssm:us-east-1:123456789012:parameter/training/*"
OWN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:training/db-AbCdEf"
OTHER = "arn:aws:secretsmanager:us-east-1:123456789012:secret:training/other-GhIjKl"
OUTSIDE = "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-MnOpQr"
PARAMETER = "arn:aws:ssm:us-east-1:123456789012:parameter/training/token"
VIA_SECRETS_MANAGER = {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}


@pytest.fixture(scope="module")
def with_secrets(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out.secrets")
    app, stack = build_app(outdir=str(outdir), context={"secret_references": f"{SECRETS},{PARAMETERS}"})
    template = app.synth().get_stack_by_name(stack.stack_name).template
    return Synthesized(outdir=outdir, stack_name=stack.stack_name, template=json.loads(json.dumps(template)))


def role(synthesized: Synthesized, prefix: str) -> list[dict[str, Any]]:
    (role_id,) = [key for key in synthesized.resources("AWS::IAM::Role") if key.startswith(prefix)]
    return role_statements(synthesized, role_id)


def session(*references: str) -> list[dict[str, Any]]:
    manifest = JobManifest.model_validate(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "training": {
                "command": ["python", "train.py"],
                "secrets": {f"S{i}": r for i, r in enumerate(references)},
            },
        }
    )
    statements: list[dict[str, Any]] = job_session_policy("tiny-0123456789ab", 1, manifest, jobs_bucket="b")[
        "Statement"
    ]
    return statements


def test_the_role_reads_the_allowed_references_and_each_session_only_its_own(
    with_secrets: Synthesized,
) -> None:
    # Given the job-access role and the session policy of a job naming one secret and one parameter
    ceiling = role(with_secrets, "JobAccessRole")
    policies = [ceiling, session(OWN, PARAMETER)]

    # Then the role alone reads any allowed secret, and nothing outside the patterns
    assert allowed(ceiling, "secretsmanager:GetSecretValue", OTHER)
    assert not allowed(ceiling, "secretsmanager:GetSecretValue", OUTSIDE)
    # and the job's session reads its own references, decrypting through the service, and not another's
    assert allowed_by_all(policies, "secretsmanager:GetSecretValue", OWN)
    assert allowed_by_all(policies, "ssm:GetParameter", PARAMETER)
    assert allowed_by_all(
        policies, "kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:key/k", VIA_SECRETS_MANAGER
    )
    assert not allowed_by_all(policies, "secretsmanager:GetSecretValue", OTHER)
    assert not allowed_by_all(policies, "kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:key/k")
    # and a session naming a reference outside the patterns still cannot read it
    assert not allowed_by_all([ceiling, session(OUTSIDE)], "secretsmanager:GetSecretValue", OUTSIDE)


def test_the_instance_role_is_denied_the_allowed_parameters(with_secrets: Synthesized) -> None:
    # Given the instance role (its SSM managed policy reads every parameter)
    statements = role(with_secrets, "InstancesRole")

    # Then an explicit Deny covers the allowed parameters' reads
    denials = [s for s in statements if s["Effect"] == "Deny"]
    assert denials == [
        {"Effect": "Deny", "Action": ["ssm:GetParameter", "ssm:GetParameters"], "Resource": PARAMETERS}
    ]


def test_the_submitting_functions_know_the_allowed_references(with_secrets: Synthesized) -> None:
    # Given the functions that admit manifests
    functions = with_secrets.marked("function")

    # Then each has the option in its settings
    for name in ("submit", "api"):
        variables = with_secrets.properties(functions[name])["Environment"]["Variables"]
        assert variables["SPOTRUN_REFERENCE_PATTERNS"] == f"{SECRETS},{PARAMETERS}"


def test_a_pattern_that_is_not_a_secrets_arn_is_refused() -> None:
    # Given a bucket's ARN as a secret reference / Then the option is refused, naming it
    with pytest.raises(OptionError, match=r"secret_references: 'arn:aws:s3:::data/\*' is not a pattern"):
        StackOptions(secret_references=("arn:aws:s3:::data/*",))
