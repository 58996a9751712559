"""The emulator's instances each run their own resident agent, which SSM delivery reaches through the document."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.agent.supervision.notice_relay import process_start_time  # noqa: E402
from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.instances.instance import SimulatedInstance  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.layout import AGENT_PID_FILE  # noqa: E402

TIME_SCALE = 0.01
POOLS = [Pool("g5.xlarge", "us-east-1a", spot_price=0.3, capacity=6, boot_delay_seconds=10.0)]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def resident_pid(sim: SimulatedInstance) -> int:
    """The pid the instance's resident agent serves under, once it does."""
    pid_file = sim.run_dir / AGENT_PID_FILE
    wait_for(pid_file.exists, f"the resident agent of {sim.instance_id}")
    pid, start = pid_file.read_text().split()
    assert process_start_time(int(pid)) == int(start)
    return int(pid)


def dead(pid: int) -> bool:
    start = process_start_time(pid)
    if start is None:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("resident")
    # No agent_argv: the real agent, which serves as each instance's resident agent.
    with handlers.pass_runtime(workdir, POOLS, TIME_SCALE) as started:
        yield started


@pytest.fixture(scope="module")
def instances(runtime: LocalRuntime) -> list[SimulatedInstance]:
    """Four instances launched at once, so that their resident agents warm up side by side."""
    subnets = runtime.client("ec2").describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))["Subnets"]
    reply = runtime.client("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 4, "DefaultTargetCapacityType": "spot"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": runtime.settings.launch_template_name},
                "Overrides": [{"InstanceType": "g5.xlarge", "SubnetId": subnets[0]["SubnetId"]}],
            }
        ],
    )
    ids = [iid for item in reply["Instances"] for iid in item["InstanceIds"]]
    assert len(ids) == 4
    for instance_id in ids:
        assert runtime.wait_managed(instance_id, timeout=10)
    return [runtime.instance(instance_id) for instance_id in ids]


def _send(runtime: LocalRuntime, sim: SimulatedInstance, name: str) -> str:
    # A command document that does not exist: the agent cannot read it and exits 2, saying so in the log.
    uri = handlers.command_uri(runtime.settings.jobs_bucket, name)
    runtime.client("ssm").send_command(
        InstanceIds=[sim.instance_id],
        DocumentName=runtime.settings.agent_document_name,
        Parameters={"commandUri": [uri]},
    )
    return uri


def _ran(sim: SimulatedInstance, uri: str) -> list[str]:
    """The log lines of the agent processes that ran ``uri``."""
    return [
        line
        for line in sim.log_path.read_text().splitlines()
        if f"cannot read the agent command at {uri}" in line
    ]


def test_each_instance_serves_its_own_resident_agent_which_runs_the_step_in_a_child(
    runtime: LocalRuntime, instances: list[SimulatedInstance]
) -> None:
    # Given two booted instances, each with the resident agent its boot started
    first, second = instances[0], instances[1]
    first_pid, second_pid = resident_pid(first), resident_pid(second)

    # When the agent document is sent to the first
    uri = _send(runtime, first, "resident-1")

    # Then its own resident agent forked the step, which ran once (exit 2: no such document), and the other
    # instance's agent saw nothing of it
    wait_for(lambda: f"for {uri} exited with status 2" in first.log_path.read_text(), "the step child's exit")
    assert first_pid != second_pid
    assert first.run_dir != second.run_dir
    assert len(_ran(first, uri)) == 1
    assert f"[{first_pid} MainThread] step child" in first.log_path.read_text()
    assert uri not in second.log_path.read_text()


def test_without_a_serving_resident_agent_the_document_starts_a_fresh_process(
    runtime: LocalRuntime, instances: list[SimulatedInstance]
) -> None:
    # Given an instance whose resident agent has stopped
    sim = instances[2]
    pid = resident_pid(sim)
    pid_file = sim.run_dir / AGENT_PID_FILE
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not pid_file.exists(), "the resident agent to stop")

    # When the agent document is sent to it
    uri = _send(runtime, sim, "fallback-1")

    # Then the step ran once, in a process of its own
    wait_for(lambda: len(_ran(sim, uri)) == 1, "the fallback agent")
    assert f"for {uri} exited" not in sim.log_path.read_text()


@pytest.mark.parametrize(("index", "end"), [(0, "kill"), (3, "hang"), (1, "terminate")])
def test_the_end_of_an_instance_ends_its_resident_agent(
    runtime: LocalRuntime, instances: list[SimulatedInstance], index: int, end: str
) -> None:
    # Given an instance serving its resident agent (the first two served a step before: that changes nothing)
    sim = instances[index]
    pid = resident_pid(sim)

    # When it is killed, hangs, or is terminated
    if end == "terminate":
        runtime.client("ec2").terminate_instances(InstanceIds=[sim.instance_id])
        assert sim.gone.wait(10)
    else:
        runtime.kill(sim.instance_id, hang=end == "hang")

    # Then its resident agent is dead
    wait_for(lambda: dead(pid), "the resident agent to die", timeout=10)
