"""The emulator's GPUs: each instance's nvidia-smi answers the agent's three invocations in NVIDIA's formats,
reads busy while the instance's training runs and idle when it is stopped or gone, and reads what a test drives
(``LocalRuntime.set_gpu``); one instance's state never reaches another's. Driving them from the chaos API and
`spotrun local gpu`: tests/integration/test_local_gpu_control.py."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from gpu_world import (  # noqa: E402
    A10G_MIB,
    DMON,
    LAUNCHER,
    QUERY,
    SLEEPER,
    agent_env,
    busy,
    clean_runtime,  # noqa: F401 - the `runtime` fixture
    query,
    running,
    served_runtime,  # noqa: F401 - the `local` fixture
    smi,
    train,
    wait_for,
)

from spotrun.local.runtime import LocalRuntime  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the fake finds training through /proc")


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
