"""The chaos control API and the `spotrun local` commands, against a real embedded runtime and its instances."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.cli.app import app  # noqa: E402
from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.control_api import ControlApi, ControlServer  # noqa: E402
from spotrun.local.control_client import LocalState, write_state  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.job.record import utc_now  # noqa: E402
from tests.integration.control_served import control_served  # noqa: E402

TIME_SCALE = 0.01
ZONES = ("us-east-1a", "us-east-1b")
POOLS = [Pool("g5.xlarge", zone, spot_price=0.3, capacity=4, boot_delay_seconds=10.0) for zone in ZONES]
ACTIONS: list[str] = []
runner = CliRunner()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalRuntime, Path]]:
    """A runtime with its control API served and its state file written, as `spotrun local up` does."""
    workdir = tmp_path_factory.mktemp("control")
    asl = workdir / "pass.asl.json"
    asl.write_text(handlers.PASS_ASL)
    agent = workdir / "stand_in_agent.py"
    agent.write_text(handlers.STAND_IN_AGENT)
    with (
        LocalRuntime(
            workdir,
            time_scale=TIME_SCALE,
            pools=POOLS,
            shape=handlers.minimal_shape(),
            state_machine_file=asl,
            agent_argv=[sys.executable, str(agent), "run", "--command-uri"],
        ) as runtime,
        control_served(runtime, workdir, TIME_SCALE, on_action=ACTIONS.append),
    ):
        yield runtime, workdir


def launch(runtime: LocalRuntime, zone: str = "us-east-1a", lifecycle: str = "spot") -> dict[str, Any]:
    """CreateFleet for one g5.xlarge in ``zone``; returns the instance part of the answer (or its errors)."""
    subnets = runtime.client("ec2").describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))["Subnets"]
    subnet = next(s["SubnetId"] for s in subnets if s["AvailabilityZone"] == zone)
    reply = runtime.client("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": lifecycle},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": runtime.settings.launch_template_name},
                "Overrides": [{"InstanceType": "g5.xlarge", "SubnetId": subnet}],
            }
        ],
    )
    return {
        "ids": [i for item in reply["Instances"] for i in item["InstanceIds"]],
        "errors": reply.get("Errors", []),
    }


def running(runtime: LocalRuntime, **options: str) -> str:
    [instance_id] = launch(runtime, **options)["ids"]
    assert runtime.wait_running(instance_id, timeout=5)
    return instance_id


def cli(workdir: Path, *argv: str) -> Any:
    """Run `spotrun local ...` with --json; return the decoded answer (the command must succeed)."""
    result = runner.invoke(app, ["local", *argv, "--state-dir", str(workdir), "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def imds(endpoint: str, path: str) -> tuple[int, str]:
    token_request = urllib.request.Request(  # noqa: S310
        f"{endpoint}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    with urllib.request.urlopen(token_request, timeout=5) as answer:  # noqa: S310
        token = answer.read().decode()
    request = urllib.request.Request(f"{endpoint}{path}", headers={"X-aws-ec2-metadata-token": token})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def described(runtime: LocalRuntime, instance_id: str) -> dict[str, Any]:
    reservations = runtime.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]  # type: ignore[no-any-return]


def listed(workdir: Path, instance_id: str) -> dict[str, Any]:
    return next(item for item in cli(workdir, "instances")["instances"] if item["instance_id"] == instance_id)


def test_instances_lists_what_the_runtime_launched(local: tuple[LocalRuntime, Path]) -> None:
    # Given a running spot instance
    runtime, workdir = local
    instance_id = running(runtime, zone="us-east-1b")

    # When the instances are listed, as JSON and as a table
    item = listed(workdir, instance_id)
    table = runner.invoke(app, ["local", "instances", "--state-dir", str(workdir)])

    # Then it is there with its pool, lifecycle and state, and no notice
    assert item["instance_type"] == "g5.xlarge"
    assert item["availability_zone"] == "us-east-1b"
    assert (item["lifecycle"], item["state"], item["instance_action"]) == ("spot", "running", None)
    assert instance_id in table.stdout


def test_interrupt_warns_through_imds_and_eventbridge_then_terminates(
    local: tuple[LocalRuntime, Path],
) -> None:
    # Given a running spot instance and a rule sending spot warnings and rebalance recommendations to a queue
    runtime, workdir = local
    sqs, events = runtime.client("sqs"), runtime.client("events")
    queue_url = sqs.create_queue(QueueName="control-notices")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    kinds = ["EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation"]
    events.put_rule(Name="control-notices", EventPattern=json.dumps({"detail-type": kinds}))
    events.put_targets(Rule="control-notices", Targets=[{"Id": "queue", "Arn": queue_arn}])
    instance_id = running(runtime)
    endpoint = runtime.instance(instance_id).imds.endpoint

    # When `spotrun local interrupt` gives it a 100 s notice (1 s real)
    answer = cli(workdir, "interrupt", instance_id, "--notice-seconds", "100")
    action = imds(endpoint, "/latest/meta-data/spot/instance-action")
    rebalance = imds(endpoint, "/latest/meta-data/events/recommendations/rebalance")
    during = listed(workdir, instance_id)

    # Then the notice is in IMDS, on the bus and in the listing while the instance still runs...
    assert answer["terminates_in_seconds"] == 100
    assert answer["terminates_in_real_seconds"] == pytest.approx(1.0)
    assert action[0] == 200
    assert json.loads(action[1])["action"] == "terminate"
    assert rebalance[0] == 200
    assert during["state"] == "running"
    assert during["instance_action"]["action"] == "terminate"
    received: set[str] = set()
    deadline = time.monotonic() + 5
    while received != set(kinds) and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", []):
            event = json.loads(message["Body"])
            assert event["detail"]["instance-id"] == instance_id
            received.add(event["detail-type"])
    assert received == set(kinds)
    # ...and when the notice ends the instance is terminated by a spot reclaim
    assert runtime.instance(instance_id).gone.wait(5)
    assert described(runtime, instance_id)["StateReason"]["Code"] == "Server.SpotInstanceTermination"
    assert listed(workdir, instance_id)["state"] == "terminated"
    assert any(line.startswith(f"interrupt {instance_id}") for line in ACTIONS)


def test_kill_ends_an_instance_without_notice(local: tuple[LocalRuntime, Path]) -> None:
    # Given a running spot instance
    runtime, workdir = local
    instance_id = running(runtime)

    # When `spotrun local kill` kills it
    cli(workdir, "kill", instance_id)

    # Then it is terminated, and no notice was ever given
    assert runtime.instance(instance_id).gone.wait(5)
    assert described(runtime, instance_id)["State"]["Name"] == "terminated"
    assert runtime.instance(instance_id).metadata.instance_action is None


def test_kill_hang_leaves_an_instance_that_looks_alive_and_answers_nothing(
    local: tuple[LocalRuntime, Path],
) -> None:
    # Given a running spot instance
    runtime, workdir = local
    instance_id = running(runtime)

    # When it is killed with --hang
    cli(workdir, "kill", instance_id, "--hang")

    # Then EC2 still says running, the listing says hung, and a second kill is refused
    item = listed(workdir, instance_id)
    assert described(runtime, instance_id)["State"]["Name"] == "running"
    assert (item["state"], item["hung"]) == ("running", True)
    again = runner.invoke(app, ["local", "kill", instance_id, "--state-dir", str(workdir)])
    assert again.exit_code == 1
    assert "already hung" in again.stderr
    runtime.client("ec2").terminate_instances(InstanceIds=[instance_id])


def test_an_exhausted_pool_refuses_launches_until_refilled(local: tuple[LocalRuntime, Path]) -> None:
    # Given the spot pool g5.xlarge in us-east-1b
    runtime, workdir = local

    # When it is exhausted, a launch is tried, then it is refilled and a launch is tried again
    cli(workdir, "exhaust", "g5.xlarge", "us-east-1b")
    starved = launch(runtime, zone="us-east-1b")
    pools = {(p["instance_type"], p["availability_zone"]): p for p in cli(workdir, "pools")["pools"]}
    refilled = cli(workdir, "refill", "g5.xlarge", "us-east-1b")
    fed = launch(runtime, zone="us-east-1b")

    # Then the first launch got InsufficientInstanceCapacity, the second an instance
    assert starved["ids"] == []
    assert [error["ErrorCode"] for error in starved["errors"]] == ["InsufficientInstanceCapacity"]
    assert pools[("g5.xlarge", "us-east-1b")]["capacity"] == 0
    assert refilled["capacity"] == 4
    assert len(fed["ids"]) == 1
    runtime.client("ec2").terminate_instances(InstanceIds=fed["ids"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["interrupt", "i-0123456789abcdef0"], "no instance i-0123456789abcdef0"),
        (["exhaust", "p5.48xlarge", "us-east-1a"], "no pool p5.48xlarge in us-east-1a"),
        (["interrupt", "{on_demand}"], "only spot instances get interrupted"),
        (["interrupt", "{terminated}"], "is already terminated"),
    ],
)
def test_impossible_chaos_is_refused_with_a_reason(
    local: tuple[LocalRuntime, Path], argv: list[str], message: str
) -> None:
    # Given an on-demand instance and a terminated one
    runtime, workdir = local
    targets: dict[str, str] = {}
    if "{on_demand}" in argv:
        targets["on_demand"] = running(runtime, lifecycle="on-demand")
    if "{terminated}" in argv:
        targets["terminated"] = running(runtime)
        runtime.client("ec2").terminate_instances(InstanceIds=[targets["terminated"]])
        assert runtime.instance(targets["terminated"]).gone.wait(5)

    # When the command targets what cannot take it
    result = runner.invoke(app, ["local", *(a.format(**targets) for a in argv), "--state-dir", str(workdir)])

    # Then it fails with exit code 1 and says why
    assert result.exit_code == 1
    assert message in result.stderr


def test_the_api_answers_bad_requests_with_400_and_unknown_paths_with_404(
    local: tuple[LocalRuntime, Path],
) -> None:
    # Given the control API's URL from the state file
    _, workdir = local
    base = json.loads((workdir / "local.json").read_text())["control_url"]

    def post(path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"{base}{path}", data=body, method="POST")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    # When it gets a body without an instance, a negative notice, and an unknown path
    missing = post("/interrupt", b"{}")
    negative = post("/interrupt", b'{"instance_id": "i-1", "notice_seconds": -1}')
    unknown = post("/reboot", b"{}")
    no_code = post("/fleet-error", b'{"code": "", "count": 1}')
    no_calls = post("/fleet-error", b'{"code": "VcpuLimitExceeded", "count": 0}')
    nothing_hidden = post("/ec2-notfound", b"{}")

    # Then each is refused with a message naming the problem
    assert (no_code[0], no_calls[0], nothing_hidden[0]) == (400, 400, 400)
    assert "code" in no_code[1]["error"]
    assert "count" in no_calls[1]["error"]
    assert "describe and/or terminate" in nothing_hidden[1]["error"]
    assert missing[0] == 400
    assert "instance_id" in missing[1]["error"]
    assert negative[0] == 400
    assert "notice_seconds" in negative[1]["error"]
    assert unknown[0] == 404


def test_a_stopped_control_api_reads_as_no_runtime(local: tuple[LocalRuntime, Path], tmp_path: Path) -> None:
    # Given a second control API of the runtime, with its own state file, then stopped
    runtime, _ = local
    server = ControlServer(ControlApi(runtime))
    state = LocalState(
        pid=os.getpid(),
        endpoint_url=runtime.endpoint_url,
        control_url=server.start(),
        time_scale=TIME_SCALE,
        workdir=str(tmp_path),
        started_at=utc_now(),
        settings=runtime.settings,
    )
    write_state(tmp_path, state)
    server.stop()

    # When a chaos command is run against it
    result = runner.invoke(app, ["local", "instances", "--state-dir", str(tmp_path)])

    # Then it says the runtime does not answer
    assert result.exit_code == 1
    assert "does not answer" in result.stderr


def test_fleet_error_makes_the_next_launches_fail_with_that_code(local: tuple[LocalRuntime, Path]) -> None:
    # Given a running emulator
    runtime, workdir = local
    # When two CreateFleet calls are made to fail with a Spot quota error, and one with a missing template
    quota = cli(workdir, "fleet-error", "MaxSpotInstanceCountExceeded", "--count", "2")
    refused = [launch(runtime), launch(runtime)]
    cli(workdir, "fleet-error", "InvalidLaunchTemplateName.NotFoundException")
    with pytest.raises(ClientError) as caught:
        launch(runtime)
    fed = launch(runtime)
    # Then the quota error comes back per pool, twice; the template error refuses the whole call; then a
    # launch succeeds again
    assert quota["kind"] == "quota"
    assert [[e["ErrorCode"] for e in r["errors"]] for r in refused] == [["MaxSpotInstanceCountExceeded"]] * 2
    assert all(r["ids"] == [] for r in refused)
    assert caught.value.response["Error"]["Code"] == "InvalidLaunchTemplateName.NotFoundException"
    assert len(fed["ids"]) == 1
    runtime.client("ec2").terminate_instances(InstanceIds=fed["ids"])


def test_ec2_notfound_hides_a_new_instance_from_describe_and_terminate(
    local: tuple[LocalRuntime, Path],
) -> None:
    # Given the next launch hidden from DescribeInstances and TerminateInstances
    runtime, workdir = local
    cli(workdir, "ec2-notfound", "--describe", "1", "--terminate", "1")
    [instance_id] = launch(runtime)["ids"]
    ec2 = runtime.client("ec2")
    # When it is described and terminated at once
    with pytest.raises(ClientError) as described_error:
        ec2.describe_instances(InstanceIds=[instance_id])
    with pytest.raises(ClientError) as terminated_error:
        ec2.terminate_instances(InstanceIds=[instance_id])
    # Then both answer NotFound, and the instance was not terminated (it still holds its slot and boots)
    assert described_error.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    assert terminated_error.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    assert not runtime.instance(instance_id).terminating
    runtime.instance(instance_id).model.terminate()
