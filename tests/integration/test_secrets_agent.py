"""The agent's stage and train steps with training.secrets, against moto: the values reach setup and the command,
never the uploaded log or a report; a reference that cannot be read is Secrets.Unavailable before anything runs."""

from __future__ import annotations

import hashlib
import sys
from typing import Any

import boto3
import pytest

from spotrun.agent.secrets import MASK, SecretReader
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.model import layout
from spotrun.model.agent_protocol.command import SECRETS_UNAVAILABLE, SETUP_FAILED, TRAINING_FAILED
from tests.integration.test_agent import command, context, failure_of, object_bytes, success_of

REGION = "us-east-1"
JOB = "j-000000000001"
VALUE = "pa55-w0rd-of-the-db-7f3a"
PRINT_AND_DIGEST = (
    "import os, hashlib, pathlib; value = os.environ['DB']; print('the command sees', value); "
    "out = pathlib.Path(os.environ['SPOTRUN_OUTPUT_DIR']); out.mkdir(parents=True, exist_ok=True); "
    "(out / 'model.npy').write_text(hashlib.sha256(value.encode()).hexdigest())"
)


@pytest.fixture
def secret_arn(s3: Any) -> str:
    """A secret holding :data:`VALUE` as a JSON key, in the same moto as the ``s3`` fixture."""
    client = boto3.client("secretsmanager", region_name=REGION)
    return str(client.create_secret(Name="spotrun/db", SecretString=f'{{"password": "{VALUE}"}}')["ARN"])


def with_reader(ctx: Any) -> Any:
    ctx.secret_reader = SecretReader(lambda service, region: boto3.client(service, region_name=region))
    return ctx


def secret_manifest(reference: str, command_code: str, **training: Any) -> dict[str, Any]:
    return {
        "name": "secret-job",
        "training": {
            "command": [sys.executable, "-c", command_code],
            "secrets": {"DB": reference},
            **training,
        },
        "outputs": {"model": "model.npy"},
    }


def test_the_value_reaches_setup_and_the_command_and_the_uploaded_log_masks_it(s3, tmp_path, secret_arn):
    # Given a job whose setup and command both print the secret's value, and the command writes its digest
    document = secret_manifest(
        f"{secret_arn}:password::",
        PRINT_AND_DIGEST,
        setup=[[sys.executable, "-c", "import os; print('setup sees', os.environ['DB'])"]],
    )
    ctx = with_reader(context(s3, tmp_path / "nvme"))

    # When the stage and train steps run
    assert execute(command("stage", document), ctx) == EXIT_REPORTED
    success_of(ctx)
    train_ctx = with_reader(context(s3, tmp_path / "nvme"))
    assert execute(command("train", document), train_ctx) == EXIT_REPORTED

    # Then the command had the value (its digest is the model), and the uploaded log shows only the mask
    result = success_of(train_ctx)
    model = object_bytes(s3, f"{layout.output_prefix(JOB)}model.npy").decode()
    assert model == hashlib.sha256(VALUE.encode()).hexdigest()
    log = object_bytes(s3, result["log_key"]).decode()
    assert f"setup sees {MASK}" in log
    assert f"the command sees {MASK}" in log
    assert VALUE not in log
    # and the file on the instance still says what was printed (it never leaves it)
    assert VALUE in layout.NvmeLayout(tmp_path / "nvme", JOB).log_file(1).read_text()


def test_a_failing_commands_log_tail_masks_the_value(s3, tmp_path, secret_arn):
    # Given a command that prints the value and fails
    document = secret_manifest(
        f"{secret_arn}:password::", "import os, sys; print('failing with', os.environ['DB']); sys.exit(3)"
    )
    ctx = with_reader(context(s3, tmp_path / "nvme"))

    # When the train step runs
    execute(command("train", document), ctx)

    # Then the failure's log tail (what the job's record keeps) holds the mask, not the value
    error, cause = failure_of(ctx)
    assert error == TRAINING_FAILED
    assert f"failing with {MASK}" in (cause.log_tail or "")
    assert VALUE not in cause.model_dump_json()


def test_a_reference_that_cannot_be_read_is_secrets_unavailable_before_anything_runs(
    s3, tmp_path, secret_arn
):
    # Given a job naming a secret that does not exist, with a setup that would leave a mark
    missing = secret_arn.replace("spotrun/db", "spotrun/gone")
    marker = tmp_path / "setup-ran"
    document = secret_manifest(
        missing, PRINT_AND_DIGEST, setup=[[sys.executable, "-c", f"open({str(marker)!r}, 'w')"]]
    )
    ctx = with_reader(context(s3, tmp_path / "nvme"))

    # When the stage step runs
    execute(command("stage", document), ctx)

    # Then it reports Secrets.Unavailable naming the variable and the reference, and nothing ran
    error, cause = failure_of(ctx)
    assert error == SECRETS_UNAVAILABLE
    assert cause.message.startswith(
        f"training.secrets.DB: {missing} cannot be read (ResourceNotFoundException"
    )
    assert not marker.exists()


def test_a_failing_setups_log_and_tail_mask_the_value(s3, tmp_path, secret_arn):
    # Given a setup command that prints the value and fails
    printing = "import os, sys; print('setup failing with', os.environ['DB']); sys.exit(2)"
    document = secret_manifest(
        f"{secret_arn}:password::", PRINT_AND_DIGEST, setup=[[sys.executable, "-c", printing]]
    )
    ctx = with_reader(context(s3, tmp_path / "nvme"))

    # When the stage step runs
    execute(command("stage", document), ctx)

    # Then the Setup.Failed report's tail and the uploaded log hold the mask, not the value
    error, cause = failure_of(ctx)
    assert error == SETUP_FAILED
    assert f"setup failing with {MASK}" in (cause.log_tail or "")
    assert VALUE not in cause.model_dump_json()
    log = object_bytes(s3, layout.log_key(JOB, 1)).decode()
    assert f"setup failing with {MASK}" in log
    assert VALUE not in log
