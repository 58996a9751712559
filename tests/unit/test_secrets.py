"""training.secrets without AWS: the references' shapes, the manifest's rules and schema, admission against the
deployment's patterns, the session policy's and the ceiling's statements, and the agent's reading and masking."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from pydantic import ValidationError

from spotrun.agent.secrets import MASK, Masker, SecretReader, SecretsUnavailableError, resolve_secrets
from spotrun.agent.steps.final_outputs import log_tail, upload_log
from spotrun.agent.supervision.command_environment import child_environment
from spotrun.control.submission import admission_problems
from spotrun.model import layout
from spotrun.model.agent_protocol.command import SECRETS_UNAVAILABLE, AgentCommand
from spotrun.model.agent_protocol.session_policy import (
    ceiling_statements,
    instance_secret_denials,
    job_session_policy,
    secret_ceiling_statements,
)
from spotrun.model.manifest.parse import manifest_json_schema
from spotrun.model.manifest.schema import JobManifest
from spotrun.model.manifest.secrets import check_pattern, is_allowed, parse_reference
from spotrun.shape import REPO_ROOT

SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:spotrun/db-AbCdEf"
PARAMETER = "arn:aws:ssm:us-east-1:123456789012:parameter/spotrun/token"
ALLOWED = (
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:spotrun/*",
    "arn:aws:ssm:us-east-1:123456789012:parameter/spotrun/*",
)
VALUE = "hunter2-value-of-the-secret"


def manifest(**training: Any) -> JobManifest:
    return JobManifest.model_validate(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "training": {"command": ["python", "train.py"], **training},
        }
    )


def refusal(**training: Any) -> str:
    with pytest.raises(ValidationError) as refused:
        manifest(**training)
    return str(refused.value)


# -- references --------------------------------------------------------------------------------------------


def test_a_secrets_manager_arn_takes_ecs_optional_json_key_and_version():
    # Given a secret's ARN alone, with a JSON key and ECS's empty trailing parts, and with a stage and an id
    plain = parse_reference(SECRET)
    keyed = parse_reference(f"{SECRET}:password::")
    versioned = parse_reference(f"{SECRET}:password:AWSPREVIOUS:0123")

    # Then each names the same secret, and the optional parts are read (empty ones are none)
    assert {plain.arn, keyed.arn, versioned.arn} == {SECRET}
    assert (plain.service, plain.region, plain.json_key) == ("secretsmanager", "us-east-1", None)
    assert (keyed.json_key, keyed.version_stage, keyed.version_id) == ("password", None, None)
    assert (versioned.version_stage, versioned.version_id) == ("AWSPREVIOUS", "0123")


def test_a_parameter_arn_is_read_and_a_bare_name_or_partial_secret_arn_refused():
    # Given a parameter's ARN, a parameter's bare name, and a secret's ARN without its six random characters
    parameter = parse_reference(PARAMETER)

    # Then the ARN is a parameter; the others are refused, saying what is accepted
    assert (parameter.service, parameter.arn) == ("ssm", PARAMETER)
    with pytest.raises(ValueError, match="not an ARN"):
        parse_reference("/spotrun/token")
    with pytest.raises(ValueError, match="complete ARN"):
        parse_reference("arn:aws:secretsmanager:us-east-1:123456789012:secret:db")


def test_patterns_match_with_iam_wildcards_and_bad_ones_are_refused():
    # Given the deployment's patterns
    # Then a reference under them is allowed, one elsewhere is not; a pattern that is no ARN is refused
    assert is_allowed(parse_reference(SECRET), ALLOWED)
    assert is_allowed(parse_reference(PARAMETER), ALLOWED)
    other = "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf"
    assert not is_allowed(parse_reference(other), ALLOWED)
    assert check_pattern(ALLOWED[0]) == ALLOWED[0]
    with pytest.raises(ValueError, match="not a pattern"):
        check_pattern("arn:aws:s3:::bucket/*")


# -- the manifest ------------------------------------------------------------------------------------------


def test_the_manifest_keeps_references_by_environment_name():
    # Given a manifest with a secret and a parameter
    document = manifest(secrets={"DB_PASSWORD": f"{SECRET}:password::", "HF_TOKEN": PARAMETER})

    # Then the references are kept as written, apart from training.env
    assert document.training.secrets == {"DB_PASSWORD": f"{SECRET}:password::", "HF_TOKEN": PARAMETER}
    assert document.training.env == {}


@pytest.mark.parametrize(
    ("training", "message"),
    [
        ({"secrets": {"1BAD": SECRET}}, "not a valid environment variable name"),
        ({"secrets": {"SPOTRUN_JOB_ID": SECRET}}, "set by spotrun itself"),
        ({"secrets": {"TOKEN": "/spotrun/token"}}, "TOKEN: '/spotrun/token' is not an ARN"),
        ({"secrets": {"TOKEN": SECRET}, "env": {"TOKEN": "plain"}}, "named in both training.env and"),
        (
            {"secrets": {"TOKEN": SECRET}, "command": ["run", "--token", "${TOKEN}"]},
            "only through its environment",
        ),
    ],
)
def test_names_references_clashes_and_argv_uses_are_refused(training: dict[str, Any], message: str):
    # Given a manifest breaking one rule of training.secrets / When it is validated / Then it is refused, saying why
    assert message in refusal(**training)


def test_the_schema_says_env_is_plain_and_secrets_holds_references():
    # Given the published manifest schema
    schema = json.loads(manifest_json_schema())
    training = schema["$defs"]["TrainingSpec"]["properties"]

    # Then env's description sends secrets to training.secrets, whose names and values are constrained
    assert "plain values only" in training["env"]["description"]
    assert "training.secrets" in training["env"]["description"]
    assert "never values" in training["secrets"]["description"]
    assert training["secrets"]["propertyNames"]["not"] == {"pattern": "^SPOTRUN_"}
    values = training["secrets"]["additionalProperties"]
    assert values["type"] == "string"
    # and the references' pattern judges as the model does, in Python's and Rust's (ECMA-like) dialects
    for reference, accepted in [
        (SECRET, True),
        (f"{SECRET}:password::", True),
        (PARAMETER, True),
        ("/spotrun/token", False),
        ("arn:aws:secretsmanager:us-east-1:123456789012:secret:db", False),
        (f"{SECRET}:a:b:c:d", False),
    ]:
        assert bool(re.search(values["pattern"], reference)) is accepted, reference
        assert jsonschema_rs.validator_for(values).is_valid(reference) is accepted, reference


# -- admission and IAM -------------------------------------------------------------------------------------


def test_admission_refuses_a_reference_outside_the_deployments_patterns():
    # Given a manifest with one allowed and one other reference
    other = "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf"
    document = manifest(secrets={"OK": SECRET, "NOT_OK": other})

    # When it is admitted by a deployment allowing spotrun/*, and by one allowing nothing
    problems = admission_problems(document, archive_buckets=(), secret_references=ALLOWED)
    none_allowed = admission_problems(document, archive_buckets=())

    # Then the other reference is refused by name, with the option to change; with no patterns, both are
    assert problems == [
        f"training.secrets.NOT_OK: {other} is not a reference this deployment allows (allowed: "
        f"{', '.join(ALLOWED)}); have the deployer add it to the CDK option secret_references"
    ]
    assert len(none_allowed) == 2
    assert "(allowed: (none))" in none_allowed[0]


def test_the_session_policy_reads_exactly_the_jobs_references_and_decrypts_through_their_services_only():
    # Given a job with a secret (by JSON key) and a parameter, and one without secrets
    with_secrets = manifest(secrets={"DB": f"{SECRET}:password::", "TOKEN": PARAMETER})

    # When their session policies are built
    statements = job_session_policy("tiny-0123456789ab", 1, with_secrets, jobs_bucket="b")["Statement"]
    plain = job_session_policy("tiny-0123456789ab", 1, manifest(), jobs_bucket="b")["Statement"]

    # Then the first reads its secret's ARN (without the key) and its parameter, and decrypts only via them
    by_sid = {s["Sid"]: s for s in statements}
    assert by_sid["Secrets"]["Action"] == "secretsmanager:GetSecretValue"
    assert by_sid["Secrets"]["Resource"] == [SECRET]
    assert by_sid["Parameters"] == {
        "Sid": "Parameters",
        "Effect": "Allow",
        "Action": "ssm:GetParameter",
        "Resource": [PARAMETER],
    }
    assert by_sid["Decrypt"]["Condition"] == {
        "StringEquals": {
            "kms:ViaService": ["secretsmanager.us-east-1.amazonaws.com", "ssm.us-east-1.amazonaws.com"]
        }
    }
    # and the second has no statement of secrets at all
    assert not {"Secrets", "Parameters", "Decrypt"} & {s["Sid"] for s in plain}


def test_the_ceiling_reads_the_patterns_and_the_instance_role_is_denied_their_parameters():
    # Given the deployment's patterns
    ceiling = secret_ceiling_statements(ALLOWED)
    denials = instance_secret_denials(ALLOWED)

    # Then the job-access role may read exactly them, and decrypt only through the two services
    assert [s["Resource"] for s in ceiling[:2]] == [[ALLOWED[0]], [ALLOWED[1]]]
    assert [s["Action"] for s in ceiling] == [
        "secretsmanager:GetSecretValue",
        "ssm:GetParameter",
        "kms:Decrypt",
    ]
    assert ceiling[2]["Condition"]["StringLike"]["kms:ViaService"] == [
        "secretsmanager.*.amazonaws.com",
        "ssm.*.amazonaws.com",
    ]
    # and the instance role (whose SSM managed policy reads every parameter) is denied the allowed parameters
    assert denials == [
        {"Effect": "Deny", "Action": ["ssm:GetParameter", "ssm:GetParameters"], "Resource": [ALLOWED[1]]}
    ]
    # and without patterns nothing is added to either
    assert secret_ceiling_statements(()) == [] == instance_secret_denials(())
    assert all(
        "secretsmanager" not in json.dumps(s)
        for s in ceiling_statements(
            "arn:aws:s3:::b", log_group_arn="arn:aws:logs:us-east-1:123456789012:log-group:/spotrun/b"
        )
    )


# -- the agent ---------------------------------------------------------------------------------------------


class FakeClients:
    """Secrets Manager and SSM stand-ins: the calls made, and the answers given."""

    def __init__(
        self, secret: dict[str, Any] | None = None, parameter: str = "", error: Exception | None = None
    ):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.secret = secret or {"SecretString": VALUE}
        self.parameter = parameter
        self.error = error

    def __call__(self, service: str, region: str) -> Any:
        return self

    def get_secret_value(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("get_secret_value", kwargs))
        if self.error:
            raise self.error
        return self.secret

    def get_parameter(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("get_parameter", kwargs))
        return {"Parameter": {"Value": self.parameter}}


def test_the_agent_reads_a_json_key_of_a_version_and_a_decrypted_parameter():
    # Given a secret holding JSON, and a parameter
    clients = FakeClients(
        secret={"SecretString": json.dumps({"password": VALUE, "port": 5432})}, parameter="tok"
    )

    # When the references are resolved
    values = resolve_secrets(
        {"DB": f"{SECRET}:password:AWSPREVIOUS:", "PORT": f"{SECRET}:port::", "TOKEN": PARAMETER},
        SecretReader(clients),
    )

    # Then the key's value (a number as its JSON text) and the parameter's are given; the version is asked for
    assert values == {"DB": VALUE, "PORT": "5432", "TOKEN": "tok"}
    assert clients.calls[0] == ("get_secret_value", {"SecretId": SECRET, "VersionStage": "AWSPREVIOUS"})
    assert clients.calls[2] == ("get_parameter", {"Name": PARAMETER, "WithDecryption": True})


@pytest.mark.parametrize(
    ("clients", "reference", "why"),
    [
        (FakeClients(error=PermissionError("AccessDeniedException")), SECRET, "AccessDeniedException"),
        (FakeClients(secret={"SecretBinary": b"x"}), SECRET, "binary"),
        (FakeClients(), f"{SECRET}:password::", "not JSON"),
        (FakeClients(secret={"SecretString": VALUE + "\x00"}), SECRET, "NUL"),
    ],
)
def test_a_reference_that_cannot_be_read_names_itself_and_why_never_the_value(
    clients: FakeClients, reference: str, why: str
):
    # Given a reference the agent cannot use / When it is resolved
    with pytest.raises(SecretsUnavailableError) as refused:
        resolve_secrets({"DB": reference}, SecretReader(clients))

    # Then the error names the variable, the reference and why, and holds no value
    message = str(refused.value)
    assert message.startswith(f"training.secrets.DB: {reference} cannot be read (")
    assert why in message
    assert VALUE not in message


def test_without_a_reader_a_job_with_secrets_cannot_start_and_one_without_needs_none():
    # Given no job credentials / Then a secret cannot be read, and no secrets need none
    with pytest.raises(SecretsUnavailableError, match="no job credentials"):
        resolve_secrets({"DB": SECRET}, None)
    assert resolve_secrets({}, None) == {}


def test_the_masker_hides_each_value_its_lines_and_the_longest_first():
    # Given two values, one containing the other, and one of two lines
    masker = Masker(["abc", "abcdef", "line one\nline two\n\n"])

    # When text holding them is masked
    masked = masker.mask("x=abcdef y=abc\nline one\n... line two ...")

    # Then each is replaced whole by the mask, and each line of the long one on its own
    assert masked == f"x={MASK} y={MASK}\n{MASK}\n... {MASK} ..."
    # and bytes that are not UTF-8 are kept as they are around a masked value
    assert masker.mask_bytes(b"\xff abc \xfe") == b"\xff *** \xfe"
    assert not Masker([""])
    assert Masker().mask("abc") == "abc"


class RecordingS3:
    def __init__(self) -> None:
        self.uploaded: dict[str, bytes] = {}

    def upload_fileobj(self, handle: Any, bucket: str, key: str, ExtraArgs: dict[str, str]) -> None:  # noqa: N803
        self.uploaded[key] = handle.read()


def test_the_uploaded_log_and_the_log_tail_are_masked_and_the_local_log_left_as_written(tmp_path: Path):
    # Given an attempt's log that printed a secret's value
    log = tmp_path / "attempt-001.log"
    log.write_bytes(f"start\ntoken is {VALUE}\nend\n".encode())
    s3 = RecordingS3()

    # When it is uploaded and its tail taken with the job's masker
    key = upload_log(s3, "bucket", "j-000000000001", 1, log, Masker([VALUE]))
    tail = log_tail(log, masker=Masker([VALUE]))

    # Then neither holds the value; the file on the instance is unchanged
    assert key == layout.log_key("j-000000000001", 1)
    assert s3.uploaded[key] == f"start\ntoken is {MASK}\nend\n".encode()
    assert tail == f"start\ntoken is {MASK}\nend"
    assert VALUE in log.read_text()


def test_the_commands_environment_holds_the_values_and_the_contract_still_wins(tmp_path: Path):
    # Given a train command whose manifest has a secret, and its resolved value
    command = AgentCommand(
        step="train",
        job_id="j-000000000001",
        attempt=1,
        region="us-east-1",
        jobs_bucket="jobs-bucket",
        manifest=manifest(secrets={"DB": SECRET}, env={"PLAIN": "1"}),
        heartbeat_seconds=1,
        poll_seconds=1,
    )
    job_layout = layout.NvmeLayout(tmp_path, command.job_id)

    # When the environment is built
    env = child_environment(command, job_layout, {"HOME": "/root"}, secrets={"DB": VALUE})

    # Then it holds the value beside training.env and the contract
    assert env["DB"] == VALUE
    assert env["PLAIN"] == "1"
    assert env["SPOTRUN_JOB_ID"] == "j-000000000001"


def test_secrets_unavailable_from_either_step_releases_the_instance_without_another():
    # Given the workflow
    asl = json.loads((REPO_ROOT / "statemachines" / "job.asl.json").read_text())

    # When the stage or train step fails with Secrets.Unavailable, the first catch that matches decides
    for state in ("StageData", "Train"):
        catches = asl["States"][state]["Catch"]
        route = next(
            c for c in catches if SECRETS_UNAVAILABLE in c["ErrorEquals"] or "States.ALL" in c["ErrorEquals"]
        )

        # Then it releases the capacity and records the failure: no relaunch on a new instance
        assert route["Next"] == "ReleaseAfterFailure", state
