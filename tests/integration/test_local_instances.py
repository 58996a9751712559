"""Simulated instances: SSM starts the agent, IMDS answers, chaos interrupts and kills."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
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
from spotrun.shape import REPO_ROOT  # noqa: E402

TIME_SCALE = 0.01
BOOT_SECONDS = 10.0  # 0.1 s real
POOLS = [
    Pool("g5.xlarge", zone, spot_price=0.3, capacity=4, boot_delay_seconds=BOOT_SECONDS)
    for zone in ("us-east-1a", "us-east-1b")
] + [Pool("g5.xlarge", "us-east-1c", spot_price=0.3, capacity=1, boot_delay_seconds=100_000)]  # never boots


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("instances")
    asl = workdir / "pass.asl.json"
    asl.write_text(handlers.PASS_ASL)
    agent = workdir / "stand_in_agent.py"
    agent.write_text(handlers.STAND_IN_AGENT)
    with LocalRuntime(
        workdir,
        time_scale=TIME_SCALE,
        pools=POOLS,
        shape=handlers.minimal_shape(),
        state_machine_file=asl,
        agent_argv=[sys.executable, str(agent), "run", "--command-uri"],
    ) as started:
        yield started


def _launch(runtime: LocalRuntime, zone: str = "us-east-1a", boot: bool = True) -> str:
    subnets = runtime.client("ec2").describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))["Subnets"]
    subnet = next(s["SubnetId"] for s in subnets if s["AvailabilityZone"] == zone)
    reply = runtime.client("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": runtime.settings.launch_template_name},
                "Overrides": [{"InstanceType": "g5.xlarge", "SubnetId": subnet}],
            }
        ],
    )
    instance_id: str = reply["Instances"][0]["InstanceIds"][0]
    if boot:
        # Booted and its SSM agent registered: only then does SSM take commands for it, as on AWS.
        assert runtime.wait_managed(instance_id, timeout=5)
    return instance_id


def _send(runtime: LocalRuntime, instance_id: str, name: str) -> dict[str, Any]:
    uri = handlers.command_uri(runtime.settings.jobs_bucket, name)
    return runtime.client("ssm").send_command(  # type: ignore[no-any-return]
        InstanceIds=[instance_id],
        DocumentName=runtime.settings.agent_document_name,
        Parameters={"commandUri": [uri]},
    )["Command"]


def _record(runtime: LocalRuntime, instance_id: str, name: str, timeout: float = 10.0) -> dict[str, Any]:
    path = runtime.instance(instance_id).nvme_dir / f"{name}.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the stand-in agent never wrote {path}"
        time.sleep(0.05)
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _imds_get(endpoint: str, path: str) -> tuple[int, str]:
    token_request = urllib.request.Request(  # noqa: S310
        f"{endpoint}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    with urllib.request.urlopen(token_request, timeout=5) as response:  # noqa: S310
        token = response.read().decode()
    request = urllib.request.Request(f"{endpoint}{path}", headers={"X-aws-ec2-metadata-token": token})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_the_agent_document_starts_the_agent_on_the_named_instance_only(runtime: LocalRuntime) -> None:
    # Given two running instances
    target, bystander = _launch(runtime), _launch(runtime, "us-east-1b")
    sim = runtime.instance(target)

    # When the agent document is sent to one of them
    command = _send(runtime, target, "stage-1")
    record = _record(runtime, target, "stage-1")

    # Then the agent ran there, with the command URI, the emulator's endpoint and the instance's own paths
    assert command["InstanceIds"] == [target]
    assert record["argv"][-3:] == [
        "run",
        "--command-uri",
        handlers.command_uri(runtime.settings.jobs_bucket, "stage-1"),
    ]
    env = record["env"]
    assert env["AWS_ENDPOINT_URL"] == runtime.endpoint_url
    # the instance signs with its own role session, from its IMDS, never with the runtime's credentials
    assert "AWS_ACCESS_KEY_ID" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] == sim.imds.endpoint
    assert env["AWS_REGION"] == "us-east-1"
    assert env["SPOTRUN_NVME_ROOT"] == str(sim.directory / "nvme")
    assert env["SPOTRUN_IMDS_ENDPOINT"] == sim.imds.endpoint
    # and none of the control plane's settings, which an EC2 instance's environment does not hold
    assert "SPOTRUN_JOBS_BUCKET" not in env
    assert "SPOTRUN_JOBS_TABLE" not in env
    assert env["PYTHONPATH"].split(":")[0] == str(REPO_ROOT)
    # its own nvidia-smi first (spotrun.local.instances.gpus), then this interpreter for the command's `python`
    assert env["PATH"].split(":")[:2] == [str(sim.directory / "bin"), str(Path(sys.executable).parent)]
    assert not (runtime.instance(bystander).nvme_dir / "stage-1.json").exists()
    ssm = runtime.client("ssm")
    assert (
        ssm.get_command_invocation(CommandId=command["CommandId"], InstanceId=target)["Status"] == "Success"
    )
    with pytest.raises(ClientError, match="InvocationDoesNotExist"):
        ssm.get_command_invocation(CommandId=command["CommandId"], InstanceId=bystander)
    assert sim.log_path.exists()


def test_commands_fail_for_booting_terminated_and_unknown_instances(runtime: LocalRuntime) -> None:
    # Given an instance still booting (in the slow pool) and one terminated
    booting = _launch(runtime, "us-east-1c", boot=False)
    terminated = _launch(runtime)
    runtime.client("ec2").terminate_instances(InstanceIds=[terminated])

    # When the agent document is sent to each, and to an id that never existed
    failures = {}
    for instance_id in (booting, terminated, "i-0123456789abcdef0"):
        with pytest.raises(ClientError) as caught:
            _send(runtime, instance_id, "never")
        failures[instance_id] = caught.value.response["Error"]["Code"]

    # Then every one fails as AWS does, and no agent was started
    assert runtime.instance(booting).state == "pending"
    assert failures == dict.fromkeys((booting, terminated, "i-0123456789abcdef0"), "InvalidInstanceId")
    assert runtime.instance(terminated).pids == []


def test_interrupt_gives_notice_through_imds_and_eventbridge_then_terminates(runtime: LocalRuntime) -> None:
    # Given a running instance whose agent sleeps (with a grandchild in its own session),
    # and a rule sending spot warnings to a queue
    sqs, events = runtime.client("sqs"), runtime.client("events")
    queue_url = sqs.create_queue(QueueName="spot-warnings")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(
        Name="test-warnings",
        EventPattern=json.dumps({"detail-type": ["EC2 Spot Instance Interruption Warning"]}),
    )
    events.put_targets(Rule="test-warnings", Targets=[{"Id": "queue", "Arn": queue_arn}])
    instance_id = _launch(runtime)
    sim = runtime.instance(instance_id)
    _send(runtime, instance_id, "train-sleep")
    record = _record(runtime, instance_id, "train-sleep")
    assert _imds_get(sim.imds.endpoint, "/latest/meta-data/spot/instance-action")[0] == 404

    # When the instance is interrupted with a 100 s notice (1 s real)
    gone = runtime.interrupt(instance_id, notice_seconds=100)
    status, body = _imds_get(sim.imds.endpoint, "/latest/meta-data/spot/instance-action")
    rebalance = _imds_get(sim.imds.endpoint, "/latest/meta-data/events/recommendations/rebalance")
    still_running = runtime.client("ec2").describe_instances(InstanceIds=[instance_id])

    # Then the notice is visible in IMDS and on the bus while the instance still runs...
    assert status == 200
    assert json.loads(body)["action"] == "terminate"
    assert rebalance[0] == 200
    assert still_running["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"
    messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", [])
    warning = json.loads(messages[0]["Body"])
    assert warning["detail"] == {"instance-id": instance_id, "instance-action": "terminate"}
    assert warning["source"] == "aws.ec2"
    # ...and when the notice ends the instance is terminated with its processes, grandchild included
    assert gone.wait(5)
    described = runtime.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"][0][
        "Instances"
    ][0]
    assert described["State"]["Name"] == "terminated"
    assert described["StateReason"]["Code"] == "Server.SpotInstanceTermination"
    assert not alive(record["pid"])
    assert not alive(record["grandchild"])
    assert instance_id not in runtime.running_instance_ids()


def test_kill_ends_the_instance_without_notice(runtime: LocalRuntime) -> None:
    # Given a running instance with a sleeping agent
    instance_id = _launch(runtime)
    _send(runtime, instance_id, "train-sleep")
    record = _record(runtime, instance_id, "train-sleep")

    # When it is killed
    assert runtime.kill(instance_id).wait(5)

    # Then its processes died without any notice having been published
    assert not alive(record["pid"])
    assert not alive(record["grandchild"])
    assert runtime.instance(instance_id).metadata.instance_action is None
    assert runtime.instance(instance_id).state == "terminated"


def test_a_hung_instance_still_looks_running_but_takes_no_command(runtime: LocalRuntime) -> None:
    # Given a running instance with a sleeping agent
    instance_id = _launch(runtime)
    _send(runtime, instance_id, "train-sleep")
    record = _record(runtime, instance_id, "train-sleep")

    # When it hangs
    runtime.kill(instance_id, hang=True)

    # Then EC2 says running, its agent is dead, and SSM cannot reach it
    assert runtime.instance(instance_id).state == "running"
    assert not alive(record["pid"])
    with pytest.raises(ClientError, match="InvalidInstanceId"):
        _send(runtime, instance_id, "again")
    runtime.client("ec2").terminate_instances(InstanceIds=[instance_id])
    assert runtime.instance(instance_id).gone.wait(5)
