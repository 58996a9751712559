"""The emulator's SendCommand checks the agent document's parameter, and the instance never reads it as script.

SSM refuses a value outside the parameter's ``allowedPattern`` with ``InvalidParameters`` before anything runs;
a parameter with ``interpolationType: ENV_VAR`` reaches the script as ``SSM_<name>`` in its environment
(https://docs.aws.amazon.com/systems-manager/latest/userguide/documents-syntax-data-elements-parameters.html).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.agent_protocol.ssm_document import AGENT_COMMAND_VARIABLE  # noqa: E402
from spotrun.shape import SHAPE  # noqa: E402

POOLS = [Pool("g5.xlarge", "us-east-1a", spot_price=0.3, capacity=2, boot_delay_seconds=10.0)]
HOSTILE = [
    "; touch pwned",
    "$(touch pwned)",
    "`touch pwned`",
    "\ntouch pwned",
    " && touch pwned",
    "' ; touch pwned '",
]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("ssm-parameters")
    asl = workdir / "pass.asl.json"
    asl.write_text(handlers.PASS_ASL)
    agent = workdir / "stand_in_agent.py"
    agent.write_text(handlers.STAND_IN_AGENT)
    with LocalRuntime(
        workdir,
        time_scale=0.01,
        pools=POOLS,
        shape=handlers.minimal_shape(),
        state_machine_file=asl,
        agent_argv=[sys.executable, str(agent), "run", "--command-uri"],
    ) as started:
        yield started


@pytest.fixture(scope="module")
def instance_id(runtime: LocalRuntime) -> str:
    reply = runtime.client("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": runtime.settings.launch_template_name},
                "Overrides": [{"InstanceType": "g5.xlarge", "SubnetId": runtime.settings.subnet_ids[0]}],
            }
        ],
    )
    launched: str = reply["Instances"][0]["InstanceIds"][0]
    assert runtime.wait_managed(launched, timeout=5)
    return launched


def _send(runtime: LocalRuntime, instance_id: str, uri: str) -> dict[str, Any]:
    return runtime.client("ssm").send_command(  # type: ignore[no-any-return]
        InstanceIds=[instance_id],
        DocumentName=SHAPE.agent_document_name,
        Parameters={"commandUri": [uri]},
    )["Command"]


def _record(runtime: LocalRuntime, instance_id: str, name: str) -> dict[str, Any]:
    path = runtime.instance(instance_id).nvme_dir / f"{name}.json"
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, f"the stand-in agent never wrote {path}"
        time.sleep(0.05)
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("tail", HOSTILE)
def test_send_command_refuses_a_uri_with_shell_syntax_before_anything_runs(
    runtime: LocalRuntime, instance_id: str, tail: str
) -> None:
    # Given a command URI of the right shape with shell syntax appended
    uri = handlers.command_uri(runtime.settings.jobs_bucket, "hostile") + tail
    ssm = runtime.client("ssm")
    before = len(ssm.list_commands()["Commands"])

    # When it is sent with the agent document
    with pytest.raises(ClientError) as refused:
        _send(runtime, instance_id, uri)

    # Then SSM answers InvalidParameters, naming the parameter, and no command exists or ran
    assert refused.value.response["Error"]["Code"] == "InvalidParameters"
    assert "commandUri" in refused.value.response["Error"]["Message"]
    assert len(ssm.list_commands()["Commands"]) == before
    assert not (runtime.instance(instance_id).nvme_dir / "hostile.json").exists()
    assert not (runtime.instance(instance_id).directory / "pwned").exists()


def test_the_uri_reaches_the_agent_through_the_environment_as_one_argument(
    runtime: LocalRuntime, instance_id: str
) -> None:
    # Given the agent document without its allowedPattern (a new default version), so shell syntax gets through
    ssm = runtime.client("ssm")
    content = SHAPE.agent_document()
    del content["parameters"]["commandUri"]["allowedPattern"]
    version = ssm.update_document(
        Name=SHAPE.agent_document_name, Content=json.dumps(content), DocumentVersion="$LATEST"
    )["DocumentDescription"]["DocumentVersion"]
    ssm.update_document_default_version(Name=SHAPE.agent_document_name, DocumentVersion=version)
    uri = handlers.command_uri(runtime.settings.jobs_bucket, "literal") + "$(touch pwned)`touch pwned`"
    try:
        # When a URI holding command substitutions is sent
        _send(runtime, instance_id, uri)
        record = _record(runtime, instance_id, "literal")
    finally:
        ssm.update_document_default_version(Name=SHAPE.agent_document_name, DocumentVersion="1")

    # Then the agent got it verbatim, as its last argument and as SSM_commandUri, and the shell ran none of it
    assert record["argv"][-1] == uri
    assert record["env"][AGENT_COMMAND_VARIABLE] == uri
    assert not (runtime.instance(instance_id).directory / "pwned").exists()
