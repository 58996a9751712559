"""The emulator's nodes of a group: each its own loopback private address, and chaos on one node."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import multinode_world as world  # noqa: E402
from multinode_world import fresh_runtime, started_runtime  # noqa: E402, F401 - the `runtime` fixture

from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.contract_variables import ENV_PROGRESS_FILE  # noqa: E402

# ------------------------------------------------------------------------------------------ private addresses


def test_each_instance_has_its_own_loopback_address_in_ec2_and_in_imds(runtime: LocalRuntime) -> None:
    # Given two nodes launched together
    ids = world.ids(world.group_fleet(runtime, 2, world.overrides(runtime)))
    assert len(ids) == 2

    # When EC2 and each instance's metadata service are asked for their private addresses
    described = world.describe(runtime, ids)
    from_imds = {iid: world.imds(runtime, iid, "/latest/meta-data/local-ipv4") for iid in ids}

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
    [first] = world.ids(world.group_fleet(runtime, 1, world.overrides(runtime)))
    address = runtime.instance(first).private_ip
    assert runtime.manager.addresses.of(first) == address
    runtime.client("ec2").terminate_instances(InstanceIds=[first])
    assert runtime.instance(first).gone.wait(10)

    # When three more are launched
    later = world.ids(world.group_fleet(runtime, 3, world.overrides(runtime)))

    # Then the terminated one holds no address any more, and the live ones hold three distinct ones
    assert runtime.manager.addresses.of(first) is None
    live = [runtime.instance(iid).private_ip for iid in later]
    assert len(set(live)) == 3


# ---------------------------------------------------------------------------------------- chaos on one node


def _two_running_nodes(runtime: LocalRuntime) -> tuple[str, str]:
    first, second = world.ids(world.group_fleet(runtime, 2, world.overrides(runtime)))
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
    assert world.imds(runtime, victim, "/latest/meta-data/spot/instance-action")[0] == 200
    assert world.imds(runtime, victim, "/latest/meta-data/events/recommendations/rebalance")[0] == 200
    assert world.imds(runtime, peer, "/latest/meta-data/spot/instance-action")[0] == 404
    assert world.imds(runtime, peer, "/latest/meta-data/events/recommendations/rebalance")[0] == 404
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
    described = world.describe(runtime, [victim, peer])
    assert described[victim]["State"]["Name"] == "terminated"
    assert described[peer]["State"]["Name"] == "running"
    assert runtime.instance(peer).reachable


def test_one_node_dies_silently_while_its_peer_runs_on(runtime: LocalRuntime) -> None:
    # Given two running nodes
    victim, peer = _two_running_nodes(runtime)

    # When one is killed without notice
    assert runtime.kill(victim).wait(10)

    # Then EC2 reports it terminated with no warning on the way, and its peer untouched
    described = world.describe(runtime, [victim, peer])
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
    assert world.imds(runtime, victim, "/latest/meta-data/instance-id") == (200, victim)
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
