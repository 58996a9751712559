"""Starting and stopping the embedded runtime leaves the process as it found it."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.shape import SHAPE, DeploymentShape, FunctionSpec  # noqa: E402

PARK_ASL = {
    "StartAt": "Park",
    "States": {
        "Park": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {
                "FunctionName": "${ParkArn}",
                "Payload": {"token.$": "$$.Task.Token", "key.$": "$.key"},
            },
            "End": True,
        }
    },
}
PARK_SHAPE = DeploymentShape(
    functions=(FunctionSpec("park", "fixtures_handlers.park", "Keeps the task token."),),
    tables=(),
    buckets=SHAPE.buckets,
    rules=(),
    state_machine_functions={"ParkArn": "park"},
)


def _moto_methods() -> dict[str, object]:
    from moto.awslambda.models import LambdaFunction
    from moto.ec2.models.fleets import FleetsBackend
    from moto.ec2.models.instances import Instance, InstanceBackend
    from moto.events.models import Rule
    from moto.ssm.models import SimpleSystemManagerBackend

    return {
        "invoke": LambdaFunction._invoke_lambda,
        "targets": Rule.send_to_targets,
        "ssm": SimpleSystemManagerBackend.send_command,
        "fleet": FleetsBackend.create_fleet,
        "run": InstanceBackend.run_instances,
        "terminate": Instance.terminate,
    }


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_restores_environment_and_moto_and_is_idempotent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a process with its own AWS settings (moto imported before: it reads the profile at import)
    before = _moto_methods()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://elsewhere:1")
    monkeypatch.setenv("AWS_PROFILE", "mine")
    monkeypatch.delenv("SPOTRUN_JOBS_TABLE", raising=False)
    asl = tmp_path / "pass.asl.json"
    asl.write_text(handlers.PASS_ASL)
    runtime = LocalRuntime(tmp_path, time_scale=0.01, shape=handlers.minimal_shape(), state_machine_file=asl)

    # When the runtime starts, then stops twice
    runtime.start()
    during = (os.environ["AWS_ENDPOINT_URL"], os.environ.get("AWS_PROFILE"), _moto_methods())
    endpoint = runtime.endpoint_url
    runtime.stop()
    runtime.stop()

    # Then while it ran everything pointed at the emulator, and afterwards all is as before
    assert during[0] == endpoint != "http://elsewhere:1"
    assert during[1] is None
    assert all(during[2][name] is not method for name, method in before.items())
    assert os.environ["AWS_ENDPOINT_URL"] == "http://elsewhere:1"
    assert os.environ["AWS_PROFILE"] == "mine"
    assert "SPOTRUN_JOBS_TABLE" not in os.environ
    assert _moto_methods() == before


def test_a_failed_start_cleans_up_and_only_one_runtime_runs_at_a_time(tmp_path: Path) -> None:
    # Given a runtime pointed at a missing state machine file
    broken = LocalRuntime(tmp_path, time_scale=0.01, state_machine_file=tmp_path / "missing.asl.json")
    before = _moto_methods()

    # When it starts
    with pytest.raises(FileNotFoundError):
        broken.start()

    # Then nothing is left behind, a new runtime can start, and a second one cannot while it runs
    assert _moto_methods() == before
    asl = tmp_path / "pass.asl.json"
    asl.write_text(handlers.PASS_ASL)
    with LocalRuntime(
        tmp_path, time_scale=0.01, shape=handlers.minimal_shape(), state_machine_file=asl
    ) as first:
        with pytest.raises(RuntimeError, match="another LocalRuntime"):
            LocalRuntime(tmp_path, shape=handlers.minimal_shape(), state_machine_file=asl).start()
        assert first.client("s3").list_buckets()["Buckets"]
    with pytest.raises(RuntimeError, match="starts once"):
        first.start()


def test_stop_ends_executions_instances_and_processes(tmp_path: Path) -> None:
    # Given an execution waiting for its task token and an instance running a sleeping agent
    asl = tmp_path / "park.asl.json"
    asl.write_text(json.dumps(PARK_ASL))
    agent = tmp_path / "stand_in_agent.py"
    agent.write_text(handlers.STAND_IN_AGENT)
    runtime = LocalRuntime(
        tmp_path,
        time_scale=0.01,
        pools=[Pool("g5.xlarge", "us-east-1a", 0.3, capacity=1, boot_delay_seconds=1)],
        shape=PARK_SHAPE,
        state_machine_file=asl,
        agent_argv=[sys.executable, str(agent)],
    ).start()
    try:
        handlers.TOKEN_PARKED.clear()
        execution_arn = runtime.client("stepfunctions").start_execution(
            stateMachineArn=runtime.settings.state_machine_arn, name="parked", input='{"key": "parked"}'
        )["executionArn"]
        assert handlers.TOKEN_PARKED.wait(10)
        ec2 = runtime.client("ec2")
        instance_id = ec2.run_instances(
            ImageId="ami-0123456789abcdef0",
            MinCount=1,
            MaxCount=1,
            InstanceType="g5.xlarge",
            SubnetId=runtime.settings.subnet_ids[0],
            InstanceMarketOptions={"MarketType": "spot"},
        )["Instances"][0]["InstanceId"]
        assert runtime.wait_managed(instance_id, 5)
        runtime.client("ssm").send_command(
            InstanceIds=[instance_id],
            DocumentName=runtime.settings.agent_document_name,
            Parameters={"commandUri": [handlers.command_uri("bucket", "train-sleep")]},
        )
        sim = runtime.instance(instance_id)
        record_path = sim.nvme_dir / "train-sleep.json"
        deadline = time.monotonic() + 10
        while not record_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        record = json.loads(record_path.read_text())
        imds = sim.imds.endpoint
    finally:
        # When the runtime stops
        runtime.stop()

    # Then the execution was stopped and its threads ended, and no process of the instance survives
    from moto.stepfunctions.parser.utils import TMP_THREADS

    assert runtime.stopped_executions == [execution_arn]
    assert not [thread for thread in TMP_THREADS if thread.is_alive()]
    assert not _alive(record["pid"])
    assert not _alive(record["grandchild"])
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{imds}/latest/meta-data/", timeout=2)  # noqa: S310
