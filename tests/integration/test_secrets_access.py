"""The emulator judges Secrets Manager and Parameter Store reads as IAM would: a job reads only its own references.

The job's credentials come from the API's credentials route (the job-access role, narrowed by the job's session
policy); the agent reads with them, as on AWS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.credentials import Credentials

from spotrun.agent.credentials import JobCredentialsSource, job_session
from spotrun.agent.secrets import SecretReader, SecretsUnavailableError, resolve_secrets
from spotrun.agent.step_runner import aws_client
from spotrun.local.instances.imds import RoleCredentials
from spotrun.local.runtime import LocalRuntime
from spotrun.local.server import ACCOUNT_ID
from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH
from spotrun.model.job.record import JobStatus
from spotrun.model.manifest.schema import JobManifest
from spotrun.shape import SHAPE, DeploymentShape
from tests.integration.agent_route_world import job_on_instance

SHAPE_UNDER_TEST = DeploymentShape(
    functions=(SHAPE.function("api"), SHAPE.function("agent_api")),
    tables=SHAPE.tables,
    buckets=SHAPE.buckets,
    rules=(),
    state_machine_functions={},
    api_routes=SHAPE.api_routes,
)
ASL = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}
NOW = datetime(2026, 1, 1, tzinfo=UTC)
REGION = "us-east-1"
OWN_VALUE = "own-secret-value-1"
OTHER_VALUE = "other-jobs-secret-value-2"
PARAMETER_VALUE = "own-parameter-value-3"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("secrets-access")
    asl = workdir / "test.asl.json"
    asl.write_text(json.dumps(ASL))
    unused = {"schedule_group": "unused", "scheduler_role_arn": "unused", "scheduled_run_arn": "unused"}
    with LocalRuntime(
        workdir, time_scale=0.01, shape=SHAPE_UNDER_TEST, state_machine_file=asl, settings_overrides=unused
    ) as started:
        yield started


def secret(runtime: LocalRuntime, name: str, value: str) -> str:
    return str(runtime.client("secretsmanager").create_secret(Name=name, SecretString=value)["ARN"])


def parameter(runtime: LocalRuntime, name: str, value: str) -> str:
    runtime.client("ssm").put_parameter(Name=name, Value=value, Type="SecureString")
    return f"arn:aws:ssm:{REGION}:{ACCOUNT_ID}:parameter/{name.lstrip('/')}"


def training_job(
    runtime: LocalRuntime, job_id: str, instance_id: str, secrets: dict[str, str]
) -> RoleCredentials:
    """A job training on ``instance_id`` with ``secrets`` (stored as is: admission is not under test); its session."""
    manifest = JobManifest.model_validate(
        {
            "name": "s",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "training": {"command": ["python", "train.py"], "secrets": secrets},
        }
    )
    return job_on_instance(runtime, job_id, instance_id, status=JobStatus.TRAINING, manifest=manifest)


def job_reader(runtime: LocalRuntime, instance: RoleCredentials, job_id: str) -> SecretReader:
    """The agent's reader: its job's credentials from the route, as ``spotrun.agent.step_runner.build_context``."""
    frozen = Credentials(instance.access_key_id, instance.secret_access_key, instance.session_token)
    source = JobCredentialsSource(
        f"{runtime.api_url}{AGENT_CREDENTIALS_PATH}",
        REGION,
        lambda: frozen,
        job_id=job_id,
        attempt=1,
        attempts=1,
    )
    session = job_session(source, REGION)
    return SecretReader(lambda service, region: aws_client(service, region, session))


def error_code(call: Any) -> str:
    try:
        call()
    except botocore.exceptions.ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return "allowed"


def test_a_job_reads_its_own_references_and_nothing_else(runtime: LocalRuntime) -> None:
    # Given a job with a secret and a parameter of its own, another job's secret, and one outside the
    # deployment's allowed spotrun/* (named by a third job whose record holds it anyway)
    own = secret(runtime, "spotrun/own", OWN_VALUE)
    other = secret(runtime, "spotrun/other", OTHER_VALUE)
    outside = secret(runtime, "prod/db", "outside-value")
    own_parameter = parameter(runtime, "/spotrun/token", PARAMETER_VALUE)
    instance = training_job(runtime, "job-s-000000000001", "i-s001", {"DB": own, "TOKEN": own_parameter})
    training_job(runtime, "job-t-000000000002", "i-t002", {"DB": other})
    third = training_job(runtime, "job-u-000000000003", "i-u003", {"DB": outside})

    # When the first job's agent reads its references with its job's credentials
    reader = job_reader(runtime, instance, "job-s-000000000001")
    values = resolve_secrets({"DB": own, "TOKEN": own_parameter}, reader)

    # Then it gets their values
    assert values == {"DB": OWN_VALUE, "TOKEN": PARAMETER_VALUE}
    # and another job's secret is refused as Secrets Manager refuses, naming the reference, not the value
    with pytest.raises(SecretsUnavailableError, match="AccessDeniedException") as refused:
        resolve_secrets({"DB": other}, reader)
    assert other in str(refused.value)
    assert OTHER_VALUE not in str(refused.value)
    # and a secret outside the deployment's patterns is refused even to the job naming it (the role's ceiling)
    with pytest.raises(SecretsUnavailableError, match="AccessDeniedException"):
        resolve_secrets({"DB": outside}, job_reader(runtime, third, "job-u-000000000003"))


def test_the_instance_role_reads_no_secret_and_no_allowed_parameter(runtime: LocalRuntime) -> None:
    # Given a job's secret and parameter, and its instance's own role session (what IMDS hands any process)
    own = secret(runtime, "spotrun/instance-test", OWN_VALUE)
    own_parameter = parameter(runtime, "/spotrun/instance-test", PARAMETER_VALUE)
    instance = training_job(runtime, "job-v-000000000004", "i-v004", {"DB": own})
    keys = {
        "region_name": REGION,
        "aws_access_key_id": instance.access_key_id,
        "aws_secret_access_key": instance.secret_access_key,
        "aws_session_token": instance.session_token,
    }

    # Then Secrets Manager and Parameter Store refuse it
    secrets = boto3.client("secretsmanager", **keys)
    ssm = boto3.client("ssm", **keys)
    assert error_code(lambda: secrets.get_secret_value(SecretId=own)) == "AccessDeniedException"
    assert (
        error_code(lambda: ssm.get_parameter(Name=own_parameter, WithDecryption=True))
        == "AccessDeniedException"
    )
    assert error_code(lambda: ssm.get_parameters(Names=[own_parameter])) == "AccessDeniedException"
    # and so do its other reads of parameters, which its SSM managed policy does not grant
    assert error_code(lambda: ssm.get_parameters_by_path(Path="/spotrun")) == "AccessDeniedException"
    assert error_code(lambda: ssm.get_parameter_history(Name=own_parameter)) == "AccessDeniedException"
    assert error_code(lambda: ssm.describe_parameters()) == "AccessDeniedException"
    # and the runtime's own credentials still read them
    assert runtime.client("secretsmanager").get_secret_value(SecretId=own)["SecretString"] == OWN_VALUE


def test_the_instance_role_reads_a_parameter_outside_the_deployments_references(
    runtime: LocalRuntime,
) -> None:
    # Given a parameter outside spotrun's allowed references, and an instance's own role session
    parameter(runtime, "/team/outside", "outside-value")
    instance = training_job(runtime, "job-w-000000000005", "i-w005", {})
    ssm = boto3.client(
        "ssm",
        region_name=REGION,
        aws_access_key_id=instance.access_key_id,
        aws_secret_access_key=instance.secret_access_key,
        aws_session_token=instance.session_token,
    )

    # When it reads it, Then it gets its value: AmazonSSMManagedInstanceCore grants ssm:GetParameter on every
    # parameter, and the deployment denies only its allowed references
    assert (
        ssm.get_parameter(Name="/team/outside", WithDecryption=True)["Parameter"]["Value"] == "outside-value"
    )
