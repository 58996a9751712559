"""An emulator runtime with simulated GPU instances, served as `spotrun local up` serves it (its control API and
state file), and what the GPU tests do on its instances: launch one, run its nvidia-smi, train on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.instances.agent_environment import agent_environment  # noqa: E402
from spotrun.local.instances.instance import SimulatedInstance  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.contract_variables import ENV_PROGRESS_FILE  # noqa: E402
from tests.integration.control_served import control_served  # noqa: E402

TIME_SCALE = 0.01
POOLS = [
    Pool("g5.12xlarge", "us-east-1a", spot_price=1.7, capacity=4, boot_delay_seconds=10.0),
    Pool("g5.xlarge", "us-east-1a", spot_price=0.3, capacity=4, boot_delay_seconds=10.0),
]
A10G_MIB = 24 * 1024  # the catalog's 24 GiB per A10G
QUERY = ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]
DMON = ["dmon", "--select", "t", "--count", "1"]
SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"
# As torchrun: a worker with TORCHELASTIC_RUN_ID in its environment, and the launcher alive beside it.
LAUNCHER = (
    "import os, subprocess, sys, time\n"
    "worker = subprocess.Popen([sys.executable, '-c', sys.argv[1]], env={**os.environ, 'TORCHELASTIC_RUN_ID': 'r'})\n"
    "while worker.poll() is None:\n"
    "    time.sleep(0.05)\n"
)


@pytest.fixture(scope="module", name="local")
def served_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalRuntime, Path]]:
    """A runtime with its control API served and its state file written, as `spotrun local up` does."""
    workdir = tmp_path_factory.mktemp("gpus")
    with (
        handlers.pass_runtime(workdir, POOLS, TIME_SCALE) as runtime,
        control_served(runtime, workdir, TIME_SCALE),
    ):
        yield runtime, workdir


@pytest.fixture(name="runtime")
def clean_runtime(local: tuple[LocalRuntime, Path]) -> Iterator[LocalRuntime]:
    """The module's runtime; every instance a test launched is terminated after it."""
    started = local[0]
    yield started
    live = [sim for sim in started.instances if not sim.terminating]
    for sim in live:
        started.chaos.resume_training(sim.instance_id)
    if live:
        started.client("ec2").terminate_instances(InstanceIds=[sim.instance_id for sim in live])
    for sim in live:
        sim.gone.wait(10)


def running(runtime: LocalRuntime, instance_type: str = "g5.12xlarge") -> SimulatedInstance:
    """One running instance of ``instance_type``."""
    [subnet] = [
        s["SubnetId"]
        for s in runtime.client("ec2").describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))[
            "Subnets"
        ]
        if s["AvailabilityZone"] == "us-east-1a"
    ]
    reply = runtime.client("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": runtime.settings.launch_template_name},
                "Overrides": [{"InstanceType": instance_type, "SubnetId": subnet}],
            }
        ],
    )
    [instance_id] = [i for item in reply["Instances"] for i in item["InstanceIds"]]
    assert runtime.wait_running(instance_id, timeout=5)
    return runtime.instance(instance_id)


def agent_env(sim: SimulatedInstance) -> dict[str, str]:
    """The environment SSM's delivery gives the instance's agent (the training command inherits it)."""
    base = {k: v for k, v in os.environ.items() if k not in (ENV_PROGRESS_FILE, "TORCHELASTIC_RUN_ID")}
    return agent_environment(sim, base, "", "cmd-1", {})


def smi(sim: SimulatedInstance, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the nvidia-smi the instance's agent finds on its PATH (shutil.which, as the agent looks it up)."""
    found = shutil.which("nvidia-smi", path=agent_env(sim)["PATH"])
    assert found is not None
    return subprocess.run([found, *args], capture_output=True, text=True, timeout=30, check=False)


def query(sim: SimulatedInstance) -> list[tuple[int, int, int, int]]:
    """``(index, utilization %, memory used MiB, memory total MiB)`` per GPU."""
    done = smi(sim, *QUERY)
    assert done.returncode == 0, done.stderr
    rows = []
    for line in done.stdout.splitlines():
        index, utilization, used, total = line.split(", ")
        rows.append((int(index), int(utilization), int(used), int(total)))
    return rows


def train(sim: SimulatedInstance, *argv: str) -> subprocess.Popen[bytes]:
    """Start a training command on the instance as its agent does: the contract's progress file set."""
    return sim.start_process(
        [sys.executable, *(argv or ("-c", SLEEPER))], {**agent_env(sim), ENV_PROGRESS_FILE: "progress.json"}
    )


def wait_for(predicate: Any, what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not {what} within {timeout} s")


def busy(rows: list[tuple[int, int, int, int]]) -> bool:
    return all(90 <= utilization <= 98 and used > 0 for _, utilization, used, _ in rows)
