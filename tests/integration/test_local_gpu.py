"""The emulator's GPUs: each instance's nvidia-smi answers the agent's three invocations in NVIDIA's formats,
reads busy while the instance's training runs and idle when it is stopped or gone, and reads what a test, the
chaos API or `spotrun local gpu` drives; one instance's state never reaches another's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.cli.app import app  # noqa: E402
from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.control_api import ControlApi, ControlServer  # noqa: E402
from spotrun.local.control_client import LocalState, write_state  # noqa: E402
from spotrun.local.instances.agent_environment import agent_environment  # noqa: E402
from spotrun.local.instances.instance import SimulatedInstance  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.contract_variables import ENV_PROGRESS_FILE  # noqa: E402
from spotrun.model.job.record import utc_now  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the fake finds training through /proc")

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
runner = CliRunner()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalRuntime, Path]]:
    """A runtime with its control API served and its state file written, as `spotrun local up` does."""
    workdir = tmp_path_factory.mktemp("gpus")
    with handlers.pass_runtime(workdir, POOLS, TIME_SCALE) as runtime:
        server = ControlServer(ControlApi(runtime))
        state = LocalState(
            pid=os.getpid(),
            endpoint_url=runtime.endpoint_url,
            control_url=server.start(),
            time_scale=TIME_SCALE,
            workdir=str(workdir),
            started_at=utc_now(),
            settings=runtime.settings,
        )
        write_state(workdir, state)
        try:
            yield runtime, workdir
        finally:
            server.stop()


@pytest.fixture
def runtime(local: tuple[LocalRuntime, Path]) -> Iterator[LocalRuntime]:
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


# --------------------------------------------------------------------------------------------- the three forms


def test_the_agent_finds_an_nvidia_smi_answering_its_three_invocations_in_nvidias_formats(
    runtime: LocalRuntime,
) -> None:
    # Given a running g5.12xlarge (four A10G GPUs in spotrun's catalog) and the PATH its agent gets
    sim = running(runtime)
    path = agent_env(sim)["PATH"]

    # When a process started on the instance with that environment looks nvidia-smi up as the agent does
    out = sim.directory / "which.txt"
    probe = sim.start_process(
        [
            sys.executable,
            "-c",
            f"import shutil; open({str(out)!r}, 'w').write(str(shutil.which('nvidia-smi')))",
        ],
        agent_env(sim),
    )
    probe.wait(timeout=30)

    # Then it finds the instance's own nvidia-smi, first on its PATH
    assert out.read_text() == str(sim.directory / "bin" / "nvidia-smi")
    assert path.split(os.pathsep)[0] == str(sim.directory / "bin")

    # And --list-gpus lists four A10Gs with distinct GPU UUIDs
    listed = smi(sim, "--list-gpus")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert len(lines) == 4
    uuid = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    for index, line in enumerate(lines):
        assert re.fullmatch(rf"GPU {index}: NVIDIA A10G \(UUID: {uuid}\)", line), line
    assert len({line.split("UUID: ")[1] for line in lines}) == 4
    # And the CSV query answers "index, utilization, used, total" per GPU, integers without units
    csv = smi(sim, *QUERY)
    assert csv.returncode == 0
    assert [
        re.fullmatch(r"(\d+), (\d+), (\d+), (\d+)", line) is not None for line in csv.stdout.splitlines()
    ] == [True] * 4
    assert [row[0] for row in query(sim)] == [0, 1, 2, 3]
    assert {row[3] for row in query(sim)} == {A10G_MIB}
    # And with a header and units when asked, as nvidia-smi prints them
    full = smi(sim, "--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv")
    assert full.stdout.splitlines()[0] == "index, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"
    assert re.fullmatch(rf"0, \d+ %, \d+ MiB, {A10G_MIB} MiB", full.stdout.splitlines()[1])
    # And dmon's PCIe throughput comes under its two '#' header lines, one right-aligned row per GPU, in both
    # spellings of its flags
    for argv in (DMON, ["dmon", "-s", "t", "-c", "1"]):
        dmon = smi(sim, *argv)
        assert dmon.returncode == 0, dmon.stderr
        header, units, *rows = dmon.stdout.splitlines()
        assert (header, units) == ("# gpu   rxpci   txpci", "# Idx    MB/s    MB/s")
        assert [re.fullmatch(r" {4}(\d)\s+(\d+)\s+(\d+)", row).group(1) for row in rows] == [
            "0",
            "1",
            "2",
            "3",
        ]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."),
        (["--bogus"], "ERROR: Option --bogus is not recognized. Please run 'nvidia-smi -h' for help."),
        (
            ["--query-gpu=index,power.draw", "--format=csv"],
            'Field "power.draw" is not a valid field to query.',
        ),
        (["--query-gpu=index"], "\"--format=\" switch is missing. Please run 'nvidia-smi -h' for help."),
        (
            ["dmon", "-s", "u", "-c", "1"],
            "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.",
        ),
        (["dmon", "-s", "t"], "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."),
    ],
)
def test_any_other_invocation_fails_as_nvidia_smi_fails_on_a_bad_argument(
    runtime: LocalRuntime, argv: list[str], message: str
) -> None:
    # Given a running GPU instance
    sim = running(runtime, "g5.xlarge")
    # When its nvidia-smi is asked something the agent never asks (an endless dmon among them)
    done = smi(sim, *argv)
    # Then it exits 2 ("A supplied argument or flag is invalid") with nvidia-smi's message, printing nothing else
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, message, "")


# ------------------------------------------------------------------------------------------- busy and idle


def test_gpus_read_busy_while_training_runs_and_idle_once_it_is_stopped_or_gone(
    runtime: LocalRuntime,
) -> None:
    # Given a running instance without training: its GPUs read idle, nothing allocated, no PCIe traffic
    sim = running(runtime)
    assert {row[1:3] for row in query(sim)} == {(0, 0)}

    # When a training command starts, then every GPU reads 90-98 % busy with memory held, PCIe moving
    training = train(sim)
    rows = wait_for(lambda: (rows := query(sim)) and busy(rows) and rows, "busy")
    assert all(0.5 * A10G_MIB < used < 0.8 * A10G_MIB for _, _, used, _ in rows)
    pcie = [line.split() for line in smi(sim, *DMON).stdout.splitlines()[2:]]
    assert all(int(rx) > 0 and int(tx) > 0 for _, rx, tx in pcie)

    # When chaos hangs the training (SIGSTOP), then its GPUs read 0 % and no PCIe traffic; the memory it
    # allocated stays held, as a stopped CUDA process keeps it
    runtime.hang_training(sim.instance_id)
    stopped = query(sim)
    assert {utilization for _, utilization, _, _ in stopped} == {0}
    assert all(used > 0 for _, _, used, _ in stopped)
    assert {(rx, tx) for _, rx, tx in (line.split() for line in smi(sim, *DMON).stdout.splitlines()[2:])} == {
        ("0", "0")
    }

    # When it resumes, busy again; once it has exited, idle with nothing allocated
    runtime.resume_training(sim.instance_id)
    assert busy(query(sim))
    training.kill()
    training.wait(timeout=10)
    assert {row[1:3] for row in query(sim)} == {(0, 0)}


def test_under_a_launcher_the_gpus_follow_its_workers_not_the_launcher(runtime: LocalRuntime) -> None:
    # Given an instance whose training runs under a launcher (as torchrun) with one worker computing
    sim = running(runtime, "g5.xlarge")
    train(sim, "-c", LAUNCHER, SLEEPER)
    wait_for(lambda: len(sim.rank_pids()) == 1 and sim.rank_pids() != sim.training_pids(), "a worker")
    assert busy(query(sim))

    # When the workers hang while the launcher runs on, then the GPU reads idle
    runtime.hang_training(sim.instance_id)
    assert query(sim)[0][1] == 0


# ------------------------------------------------------------------------------------------------ driven


def test_driven_values_replace_the_readings_until_reset(runtime: LocalRuntime) -> None:
    # Given a training instance whose four GPUs read busy
    sim = running(runtime)
    train(sim)
    wait_for(lambda: busy(query(sim)), "busy")

    # When GPU 1 is driven to 4 % with 95 % of its memory, and then every GPU's utilization to 2 %
    one = runtime.set_gpu(sim.instance_id, utilization=4, memory_percent=95, gpu=1)
    after_one = query(sim)
    every = runtime.set_gpu(sim.instance_id, utilization=2)
    after_every = query(sim)

    # Then GPU 1 reads exactly that while the others follow the training, then all read 2 % (GPU 1 keeps its
    # driven memory)
    assert one[1] == {"index": 1, "uuid": one[1]["uuid"], "utilization": 4.0, "memory_percent": 95.0}
    assert after_one[1] == (1, 4, round(0.95 * A10G_MIB), A10G_MIB)
    assert busy([row for row in after_one if row[0] != 1])
    assert [row[1] for row in after_every] == [2, 2, 2, 2]
    assert after_every[1][2] == round(0.95 * A10G_MIB)
    assert [g["utilization"] for g in every] == [2.0] * 4

    # When reset, then the readings follow the training again
    assert {g["utilization"] for g in runtime.reset_gpu(sim.instance_id)} == {None}
    assert busy(query(sim))


def test_values_out_of_range_or_a_gpu_the_instance_lacks_are_refused(runtime: LocalRuntime) -> None:
    # Given a one-GPU instance
    sim = running(runtime, "g5.xlarge")
    # When it is driven wrong, then each is refused with what is wrong, and nothing changed
    with pytest.raises(ValueError, match="GPUs 0 to 0, not 3"):
        runtime.set_gpu(sim.instance_id, utilization=50, gpu=3)
    with pytest.raises(ValueError, match="between 0 and 100"):
        runtime.set_gpu(sim.instance_id, utilization=120)
    with pytest.raises(ValueError, match="utilization and/or a memory percent"):
        runtime.set_gpu(sim.instance_id)
    with pytest.raises(KeyError):
        runtime.set_gpu("i-00000000000000000", utilization=5)
    assert sim.gpus.driven()[0]["utilization"] is None


def test_a_script_rewriting_its_instances_gpu_state_fools_only_its_own_readings(
    runtime: LocalRuntime,
) -> None:
    # Given two instances, the first driven to 50 %
    first, second = running(runtime, "g5.xlarge"), running(runtime, "g5.xlarge")
    runtime.set_gpu(first.instance_id, utilization=50)

    # When a script on the first rewrites its GPU state file (claiming another instance's id and 99 %)
    state_file = first.directory / "gpu" / "state.json"
    state = json.loads(state_file.read_text())
    state["instance_id"] = second.instance_id
    state["gpus"][0]["utilization"] = 99
    state_file.write_text(json.dumps(state))

    # Then the first's own nvidia-smi reads the forgery, while the second's readings and what the runtime holds
    # for the first are untouched; the runtime's next write replaces the forgery
    assert query(first)[0][1] == 99
    assert query(second)[0][1] == 0
    assert runtime.instance(first.instance_id).gpus.driven()[0]["utilization"] == 50.0
    runtime.set_gpu(first.instance_id, memory_percent=10)
    assert query(first)[0][1:3] == (50, round(0.10 * A10G_MIB))


# ----------------------------------------------------------------------------------------- chaos API and CLI


def test_the_chaos_api_drives_and_resets_an_instances_gpus(
    runtime: LocalRuntime, local: tuple[LocalRuntime, Path]
) -> None:
    # Given a running four-GPU instance and the control API of `spotrun local up`
    sim = running(runtime)
    api = ControlApi(runtime)

    # When GPU 2 is driven to 91 % memory, then the whole instance reset
    driven = api.handle(
        "POST", "/gpu", json.dumps({"instance_id": sim.instance_id, "memory_percent": 91, "gpu": 2}).encode()
    )
    read = query(sim)
    listed = api.handle("GET", "/instances", b"")[1]["instances"]
    reset = api.handle("POST", "/gpu", json.dumps({"instance_id": sim.instance_id, "reset": True}).encode())

    # Then the API answered each GPU's driven values, nvidia-smi read them, the listing shows them, and reset
    # cleared them
    assert driven[0] == 200
    assert [(g["index"], g["memory_percent"]) for g in driven[1]["gpus"]] == [
        (0, None),
        (1, None),
        (2, 91.0),
        (3, None),
    ]
    assert read[2][2] == round(0.91 * A10G_MIB)
    [shown] = [i for i in listed if i["instance_id"] == sim.instance_id]
    assert shown["gpus"][2]["memory_percent"] == 91.0
    assert reset[0] == 200
    assert {g["memory_percent"] for g in reset[1]["gpus"]} == {None}
    assert query(sim)[2][2] == 0
    # And wrong requests are refused with their reason
    bad = [
        {"instance_id": sim.instance_id, "utilization": 101},
        {"instance_id": sim.instance_id, "utilization": 5, "gpu": 7},
        {"instance_id": sim.instance_id, "utilization": 5, "reset": True},
        {"instance_id": sim.instance_id},
    ]
    assert [api.handle("POST", "/gpu", json.dumps(body).encode())[0] for body in bad] == [400, 400, 400, 400]
    assert (
        api.handle(
            "POST", "/gpu", json.dumps({"instance_id": "i-00000000000000000", "utilization": 1}).encode()
        )[0]
        == 404
    )


def test_spotrun_local_gpu_drives_the_running_runtimes_gpus(
    runtime: LocalRuntime, local: tuple[LocalRuntime, Path]
) -> None:
    # Given `spotrun local up` running (its state file) and a training instance
    workdir = local[1]
    sim = running(runtime)
    train(sim)
    wait_for(lambda: busy(query(sim)), "busy")

    # When `spotrun local gpu` sets every GPU to 3 %, then GPU 0's memory to 93 %, then resets
    def gpu(*argv: str) -> Any:
        result = runner.invoke(
            app, ["local", "gpu", sim.instance_id, *argv, "--state-dir", str(workdir), "--json"]
        )
        assert result.exit_code == 0, result.output + result.stderr
        return json.loads(result.stdout)

    low = gpu("--utilization", "3")
    low_read = query(sim)
    high = gpu("--memory-percent", "93", "--gpu", "0")
    high_read = query(sim)
    gpu("--reset")

    # Then nvidia-smi read each, and after the reset the training's busy readings again
    assert [g["utilization"] for g in low["gpus"]] == [3.0] * 4
    assert [row[1] for row in low_read] == [3] * 4
    assert high["gpus"][0]["memory_percent"] == 93.0
    assert high_read[0][2] == round(0.93 * A10G_MIB)
    assert busy(query(sim))
    # And the text answer names each GPU; a mixed or empty request is a usage error
    text = runner.invoke(
        app,
        ["local", "gpu", sim.instance_id, "--utilization", "7", "--gpu", "1", "--state-dir", str(workdir)],
    )
    assert text.exit_code == 0
    assert f"{sim.instance_id} GPU 1: utilization 7 %" in text.stdout
    assert f"{sim.instance_id} GPU 0: follows its training" in text.stdout
    for argv in (["--reset", "--utilization", "3"], []):
        refused = runner.invoke(app, ["local", "gpu", sim.instance_id, *argv, "--state-dir", str(workdir)])
        assert refused.exit_code == 2, refused.output
