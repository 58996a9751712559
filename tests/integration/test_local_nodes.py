"""The emulator for multi-node jobs: group fleets, placement groups, loopback private addresses, chaos on one node."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import sys
import time
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
from spotrun.model.contract_variables import ENV_PROGRESS_FILE  # noqa: E402

TIME_SCALE = 0.01
BOOT_SECONDS = 40.0  # 0.4 s real

# g5 in 1a is the cheapest but holds one node; g5 in 1b holds two; g6 in 1a holds three and costs most.
POOLS = [
    Pool("g5.xlarge", "us-east-1a", spot_price=0.30, capacity=1, boot_delay_seconds=BOOT_SECONDS),
    Pool("g5.xlarge", "us-east-1b", spot_price=0.35, capacity=2, boot_delay_seconds=BOOT_SECONDS),
    Pool("g6.xlarge", "us-east-1a", spot_price=0.40, capacity=3, boot_delay_seconds=BOOT_SECONDS),
]


@pytest.fixture(scope="module")
def module_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("multinode")
    asl = workdir / "pass.asl.json"
    asl.write_text(handlers.PASS_ASL)
    with LocalRuntime(
        workdir, time_scale=TIME_SCALE, pools=POOLS, shape=handlers.minimal_shape(), state_machine_file=asl
    ) as started:
        yield started


@pytest.fixture
def runtime(module_runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    """The module's runtime, with every instance a test launched terminated and every pool refilled after."""
    yield module_runtime
    live = [sim for sim in module_runtime.instances if not sim.terminating]
    for sim in live:
        module_runtime.chaos.resume_training(sim.instance_id)
    if live:
        module_runtime.client("ec2").terminate_instances(InstanceIds=[sim.instance_id for sim in live])
    for sim in live:
        sim.gone.wait(10)
    for pool in POOLS:
        module_runtime.capacity.refill(pool.instance_type, pool.availability_zone)


def _subnets(runtime: LocalRuntime) -> dict[str, str]:
    subnets = runtime.client("ec2").describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))["Subnets"]
    return {s["AvailabilityZone"]: s["SubnetId"] for s in subnets}


def _overrides(runtime: LocalRuntime, **extra: Any) -> list[dict[str, Any]]:
    by_zone = _subnets(runtime)
    return [
        {"InstanceType": itype, "SubnetId": by_zone[zone], **extra}
        for itype, zone in (
            ("g5.xlarge", "us-east-1a"),
            ("g5.xlarge", "us-east-1b"),
            ("g6.xlarge", "us-east-1a"),
        )
    ]


def _group_fleet(
    runtime: LocalRuntime, nodes: int, overrides: list[dict[str, Any]], **spot_options: Any
) -> dict[str, Any]:
    """An instant spot fleet for ``nodes`` nodes, all in one pool or none (what a multi-node job asks)."""
    options = {
        "AllocationStrategy": "price-capacity-optimized",
        "SingleAvailabilityZone": True,
        "SingleInstanceType": True,
        "MinTargetCapacity": nodes,
        **spot_options,
    }
    return runtime.client("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": nodes, "DefaultTargetCapacityType": "spot"},
        SpotOptions={k: v for k, v in options.items() if v is not None},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": runtime.settings.launch_template_name,
                    "Version": "$Latest",
                },
                "Overrides": overrides,
            }
        ],
    )


def _ids(reply: dict[str, Any]) -> list[str]:
    return [iid for launched in reply["Instances"] for iid in launched["InstanceIds"]]


def _describe(runtime: LocalRuntime, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
    reservations = runtime.client("ec2").describe_instances(InstanceIds=instance_ids)["Reservations"]
    return {i["InstanceId"]: i for r in reservations for i in r["Instances"]}


def _imds(runtime: LocalRuntime, instance_id: str, path: str) -> tuple[int, str]:
    endpoint = runtime.instance(instance_id).imds.endpoint
    put = urllib.request.Request(  # noqa: S310 - a local URL
        f"{endpoint}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    with urllib.request.urlopen(put, timeout=5) as answer:  # noqa: S310
        token = answer.read().decode()
    get = urllib.request.Request(f"{endpoint}{path}", headers={"X-aws-ec2-metadata-token": token})  # noqa: S310
    try:
        with urllib.request.urlopen(get, timeout=5) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


# ------------------------------------------------------------------------------------------ private addresses


def test_each_instance_has_its_own_loopback_address_in_ec2_and_in_imds(runtime: LocalRuntime) -> None:
    # Given two nodes launched together
    ids = _ids(_group_fleet(runtime, 2, _overrides(runtime)))
    assert len(ids) == 2

    # When EC2 and each instance's metadata service are asked for their private addresses
    described = _describe(runtime, ids)
    from_imds = {iid: _imds(runtime, iid, "/latest/meta-data/local-ipv4") for iid in ids}

    # Then each has its own 127.0.0.k (not the emulator's 127.0.0.1), the same in the instance, its primary
    # interface and its IMDS
    addresses = {iid: described[iid]["PrivateIpAddress"] for iid in ids}
    assert len(set(addresses.values())) == 2
    for iid, address in addresses.items():
        assert ipaddress.ip_address(address) in ipaddress.ip_network("127.0.0.0/8")
        assert address != "127.0.0.1"
        [nic] = described[iid]["NetworkInterfaces"]
        assert nic["PrivateIpAddress"] == address
        assert [a["PrivateIpAddress"] for a in nic["PrivateIpAddresses"] if a["Primary"]] == [address]
        assert from_imds[iid] == (200, address)
        assert runtime.instance(iid).private_ip == address


def test_a_terminated_instance_gives_its_address_back_and_live_ones_never_share(
    runtime: LocalRuntime,
) -> None:
    # Given one node, terminated once it is gone
    [first] = _ids(_group_fleet(runtime, 1, _overrides(runtime)))
    address = runtime.instance(first).private_ip
    assert runtime.manager.addresses.of(first) == address
    runtime.client("ec2").terminate_instances(InstanceIds=[first])
    assert runtime.instance(first).gone.wait(10)

    # When three more are launched
    later = _ids(_group_fleet(runtime, 3, _overrides(runtime)))

    # Then the terminated one holds no address any more, and the live ones hold three distinct ones
    assert runtime.manager.addresses.of(first) is None
    live = [runtime.instance(iid).private_ip for iid in later]
    assert len(set(live)) == 3


# ------------------------------------------------------------------------------------------- group fleets


def test_a_group_fleet_puts_every_node_in_one_pool_even_when_a_cheaper_pool_holds_some(
    runtime: LocalRuntime,
) -> None:
    # Given g5 in 1a cheapest but with room for one node, g5 in 1b with room for two

    # When two nodes are asked for, all in one zone and of one type, two at least
    reply = _group_fleet(runtime, 2, _overrides(runtime))

    # Then both launch in g5 1b (not one in 1a and one in 1b), and the pool counts both
    ids = _ids(reply)
    assert len(ids) == 2
    described = _describe(runtime, ids)
    assert {(i["InstanceType"], i["Placement"]["AvailabilityZone"]) for i in described.values()} == {
        ("g5.xlarge", "us-east-1b")
    }
    assert runtime.capacity.used("g5.xlarge", "us-east-1b") == 2
    assert runtime.capacity.free("g5.xlarge", "us-east-1b") == 0
    assert runtime.capacity.used("g5.xlarge", "us-east-1a") == 0


def test_a_group_fleet_launches_nothing_when_no_pool_holds_every_node(runtime: LocalRuntime) -> None:
    # Given no pool with room for four nodes (3 at most), though the pools hold six together

    # When four nodes are asked for, all or nothing
    reply = _group_fleet(runtime, 4, _overrides(runtime))

    # Then nothing launches, and each pool says why in the instant fleet's Errors, as EC2 does
    assert reply["Instances"] == []
    assert {e["ErrorCode"] for e in reply["Errors"]} == {"InsufficientInstanceCapacity"}
    assert {
        (e["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"], e["Lifecycle"])
        for e in reply["Errors"]
    } == {("g5.xlarge", "spot"), ("g6.xlarge", "spot")}
    assert len(reply["Errors"]) == 3
    assert all(runtime.capacity.used(p.instance_type, p.availability_zone) == 0 for p in POOLS)
    assert runtime.running_instance_ids() == []


def test_without_a_minimum_a_single_zone_fleet_launches_what_one_pool_can(runtime: LocalRuntime) -> None:
    # Given no minimum target capacity

    # When four nodes are asked for in one zone and of one type
    reply = _group_fleet(runtime, 4, _overrides(runtime), MinTargetCapacity=None)

    # Then the pool that can launch most (g6 1a, three) does, and the rest is reported short
    ids = _ids(reply)
    assert len(ids) == 3
    assert {i["InstanceType"] for i in _describe(runtime, ids).values()} == {"g6.xlarge"}
    assert reply["Errors"]


def test_a_group_fleet_without_an_allocation_strategy_takes_ec2s_default(runtime: LocalRuntime) -> None:
    # When two nodes are asked for with no allocation strategy (EC2's default: lowest-price)
    reply = _group_fleet(runtime, 2, _overrides(runtime), AllocationStrategy=None)

    # Then both launch in the cheapest pool that holds both
    ids = _ids(reply)
    assert len(ids) == 2
    assert {i["Placement"]["AvailabilityZone"] for i in _describe(runtime, ids).values()} == {"us-east-1b"}


def test_a_minimum_without_single_zone_or_type_is_refused(runtime: LocalRuntime) -> None:
    # When a minimum is asked for without saying one zone or one type
    with pytest.raises(ClientError) as refused:
        _group_fleet(runtime, 2, _overrides(runtime), SingleAvailabilityZone=None, SingleInstanceType=None)

    # Then EC2 refuses the call as a whole, and nothing launched
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "SingleAvailabilityZone" in refused.value.response["Error"]["Message"]
    assert runtime.running_instance_ids() == []
    assert not any(not s.terminating for s in runtime.instances)


# --------------------------------------------------------------------------------------- placement groups


def test_nodes_launch_into_the_placement_group_their_overrides_name(runtime: LocalRuntime) -> None:
    # Given a cluster placement group
    ec2 = runtime.client("ec2")
    created = ec2.create_placement_group(GroupName="job-nodes", Strategy="cluster")["PlacementGroup"]
    assert (created["GroupName"], created["Strategy"], created["State"]) == (
        "job-nodes",
        "cluster",
        "available",
    )

    # When two nodes are launched with overrides naming it
    ids = _ids(_group_fleet(runtime, 2, _overrides(runtime, Placement={"GroupName": "job-nodes"})))

    # Then both are in it, it is listed, and it cannot be deleted while they run
    assert len(ids) == 2
    assert {i["Placement"]["GroupName"] for i in _describe(runtime, ids).values()} == {"job-nodes"}
    [listed] = ec2.describe_placement_groups(GroupNames=["job-nodes"])["PlacementGroups"]
    assert listed["GroupId"] == created["GroupId"]
    with pytest.raises(ClientError, match=r"InvalidPlacementGroup\.InUse"):
        ec2.delete_placement_group(GroupName="job-nodes")
    with pytest.raises(ClientError, match=r"InvalidPlacementGroup\.Duplicate"):
        ec2.create_placement_group(GroupName="job-nodes", Strategy="cluster")

    # And once they are terminated it can be, after which it is unknown
    ec2.terminate_instances(InstanceIds=ids)
    ec2.delete_placement_group(GroupName="job-nodes")
    with pytest.raises(ClientError, match=r"InvalidPlacementGroup\.Unknown"):
        ec2.describe_placement_groups(GroupNames=["job-nodes"])


def test_a_placement_group_that_does_not_exist_launches_nothing(runtime: LocalRuntime) -> None:
    # When nodes are asked for in a placement group nobody created
    reply = _group_fleet(runtime, 2, _overrides(runtime, Placement={"GroupName": "no-such-group"}))

    # Then nothing launches and every override is refused for the unknown group
    assert reply["Instances"] == []
    assert {e["ErrorCode"] for e in reply["Errors"]} == {"InvalidPlacementGroup.Unknown"}
    assert "no-such-group" in reply["Errors"][0]["ErrorMessage"]
    assert all(runtime.capacity.used(p.instance_type, p.availability_zone) == 0 for p in POOLS)


def test_an_instance_outside_any_placement_group_says_none(runtime: LocalRuntime) -> None:
    # When a node is launched with no placement group
    [iid] = _ids(_group_fleet(runtime, 1, _overrides(runtime)))
    # Then its placement names none, as EC2's does
    assert _describe(runtime, [iid])[iid]["Placement"].get("GroupName", "") == ""


# ---------------------------------------------------------------------------------------- chaos on one node


def _two_running_nodes(runtime: LocalRuntime) -> tuple[str, str]:
    first, second = _ids(_group_fleet(runtime, 2, _overrides(runtime)))
    assert runtime.wait_running(first, timeout=10)
    assert runtime.wait_running(second, timeout=10)
    return first, second


def _queue_of_ec2_events(runtime: LocalRuntime, name: str) -> str:
    sqs, events = runtime.client("sqs"), runtime.client("events")
    queue_url: str = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation"],
    }
    events.put_rule(Name=name, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": arn}])
    return queue_url


def test_interrupting_one_node_warns_and_reclaims_it_alone(runtime: LocalRuntime) -> None:
    # Given two running nodes and a queue of EC2's spot events
    victim, peer = _two_running_nodes(runtime)
    queue_url = _queue_of_ec2_events(runtime, "one-node-interrupted")

    # When one of them is interrupted (a 10 s notice: 0.1 s real)
    gone = runtime.interrupt(victim, notice_seconds=10.0)

    # Then it alone got the rebalance recommendation and the warning, through IMDS and EventBridge
    assert _imds(runtime, victim, "/latest/meta-data/spot/instance-action")[0] == 200
    assert _imds(runtime, victim, "/latest/meta-data/events/recommendations/rebalance")[0] == 200
    assert _imds(runtime, peer, "/latest/meta-data/spot/instance-action")[0] == 404
    assert _imds(runtime, peer, "/latest/meta-data/events/recommendations/rebalance")[0] == 404
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + 5
    sqs = runtime.client("sqs")
    while len(seen) < 2 and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
            body = json.loads(message["Body"])
            seen.append((body["detail-type"], body["detail"]["instance-id"]))
    assert sorted(seen) == [
        ("EC2 Instance Rebalance Recommendation", victim),
        ("EC2 Spot Instance Interruption Warning", victim),
    ]
    # And it was terminated after the notice while its peer runs on
    assert gone.wait(10)
    described = _describe(runtime, [victim, peer])
    assert described[victim]["State"]["Name"] == "terminated"
    assert described[peer]["State"]["Name"] == "running"
    assert runtime.instance(peer).reachable


def test_one_node_dies_silently_while_its_peer_runs_on(runtime: LocalRuntime) -> None:
    # Given two running nodes
    victim, peer = _two_running_nodes(runtime)

    # When one is killed without notice
    assert runtime.kill(victim).wait(10)

    # Then EC2 reports it terminated with no warning on the way, and its peer untouched
    described = _describe(runtime, [victim, peer])
    assert described[victim]["State"]["Name"] == "terminated"
    assert runtime.instance(victim).metadata.instance_action is None
    assert described[peer]["State"]["Name"] == "running"
    assert runtime.instance(peer).reachable


# Counts in a file, replaced whole each time, so a stop between two writes never leaves it empty.
COUNTER = """
import os, sys, time
path = sys.argv[1]
n = 0
while True:
    n += 1
    with open(path + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(path + ".tmp", path)
    time.sleep(0.01)
"""


def _count(path: Path) -> int:
    deadline = time.monotonic() + 10  # a Python process's start, on a loaded machine
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text:
            return int(text)
        time.sleep(0.01)
    raise AssertionError(f"nothing counted in {path}")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds an instance's processes through /proc")
def test_a_hung_node_keeps_its_agent_while_its_training_neither_advances_nor_dies(
    runtime: LocalRuntime,
) -> None:
    # Given two running nodes, one running a training command (its environment has the contract's progress
    # file, as the agent sets it) beside an agent-like process, both counting in a file
    victim, peer = _two_running_nodes(runtime)
    sim = runtime.instance(victim)
    steps, beats = sim.directory / "steps", sim.directory / "beats"
    env = {**os.environ}
    env.pop(ENV_PROGRESS_FILE, None)
    training = sim.start_process(
        [sys.executable, "-c", COUNTER, str(steps)], {**env, ENV_PROGRESS_FILE: str(sim.directory / "p")}
    )
    agent = sim.start_process([sys.executable, "-c", COUNTER, str(beats)], env)
    _count(steps), _count(beats)

    # When its training hangs
    stopped = runtime.hang_training(victim)

    # Then only the training process is stopped: it neither advances nor exits, while the agent-like process
    # counts on, the instance answers IMDS and stays running, and the peer is untouched
    assert stopped == [training.pid]
    assert _state(training.pid) == "T"
    frozen = _count(steps)
    beat = _count(beats)
    time.sleep(0.3)
    assert _count(steps) == frozen
    assert _count(beats) > beat
    assert training.poll() is None
    assert agent.poll() is None
    assert sim.reachable
    assert _imds(runtime, victim, "/latest/meta-data/instance-id") == (200, victim)
    assert runtime.instance(peer).reachable

    # And continued, it advances again; terminated while stopped, it gets the shutdown's SIGTERM, not SIGKILL
    assert runtime.resume_training(victim) == [training.pid]
    time.sleep(0.1)
    assert _count(steps) > frozen
    runtime.hang_training(victim)
    runtime.client("ec2").terminate_instances(InstanceIds=[victim])
    assert sim.gone.wait(10)
    assert training.poll() == -signal.SIGTERM


def test_hanging_an_instance_with_no_training_is_refused(runtime: LocalRuntime) -> None:
    # Given a running node with no training command
    victim, _ = _two_running_nodes(runtime)
    # When its training is hung, then the emulator says there is none
    with pytest.raises(RuntimeError, match="no training process"):
        runtime.hang_training(victim)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds an instance's processes through /proc")
def test_the_control_api_hangs_and_resumes_one_nodes_training_and_lists_each_nodes_address(
    runtime: LocalRuntime,
) -> None:
    from spotrun.local.control_api import ControlApi

    # Given two running nodes, one running a training command, and the control API of `spotrun local up`
    victim, peer = _two_running_nodes(runtime)
    sim = runtime.instance(victim)
    env = {k: v for k, v in os.environ.items() if k != ENV_PROGRESS_FILE}
    training = sim.start_process(
        [sys.executable, "-c", COUNTER, str(sim.directory / "steps")], {**env, ENV_PROGRESS_FILE: "p"}
    )
    api = ControlApi(runtime)

    # When the peer's training is hung (it runs none), then the victim's, then the victim's resumed
    refused = api.handle("POST", "/hang-training", json.dumps({"instance_id": peer}).encode())
    hung = api.handle("POST", "/hang-training", json.dumps({"instance_id": victim}).encode())
    stopped_state = _state(training.pid)
    resumed = api.handle(
        "POST", "/hang-training", json.dumps({"instance_id": victim, "resume": True}).encode()
    )

    # Then the peer's is refused for want of training, the victim's process was stopped then continued
    assert refused[0] == 409
    assert "no training process" in refused[1]["error"]
    assert hung == (200, {"instance_id": victim, "resume": False, "pids": [training.pid]})
    assert stopped_state == "T"
    assert resumed == (200, {"instance_id": victim, "resume": True, "pids": [training.pid]})
    assert _state(training.pid) != "T"
    # And the listing shows each node's own private address
    status, listing = api.handle("GET", "/instances", b"")
    assert status == 200
    shown = {i["instance_id"]: i["private_ip"] for i in listing["instances"]}
    assert shown[victim] == sim.private_ip
    assert shown[peer] == runtime.instance(peer).private_ip


LAUNCHER = """
import os, subprocess, sys, time
# As torchrun: a worker with TORCHELASTIC_RUN_ID in its environment, and the launcher alive beside it.
env = {**os.environ, "TORCHELASTIC_RUN_ID": "r"}
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env)
n = 0
while worker.poll() is None:
    n += 1
    with open(sys.argv[3] + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(sys.argv[3] + ".tmp", sys.argv[3])
    time.sleep(0.01)
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds an instance's processes through /proc")
def test_under_a_launcher_only_the_ranks_hang_and_the_launcher_runs_on(runtime: LocalRuntime) -> None:
    # Given a node whose training command is a launcher (as torchrun) running one worker, each counting
    victim, _ = _two_running_nodes(runtime)
    sim = runtime.instance(victim)
    steps, beats = sim.directory / "rank-steps", sim.directory / "launcher-beats"
    env = {**{k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}, ENV_PROGRESS_FILE: "p"}
    launcher = sim.start_process([sys.executable, "-c", LAUNCHER, COUNTER, str(steps), str(beats)], env)
    _count(steps), _count(beats)

    # When its training hangs
    [stopped] = runtime.hang_training(victim)

    # Then the worker is stopped and the launcher is not: it runs on, as torchrun does when a collective hangs
    assert stopped != launcher.pid
    assert _state(stopped) == "T"
    assert _state(launcher.pid) != "T"
    frozen, beat = _count(steps), _count(beats)
    time.sleep(0.3)
    assert _count(steps) == frozen
    assert _count(beats) > beat
