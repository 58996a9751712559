"""The emulator's GPUs driven from outside the runtime: the chaos API's ``POST /gpu`` and `spotrun local gpu`
against a running `spotrun local up` (its state file), each read back through the instance's nvidia-smi."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from gpu_world import (  # noqa: E402
    A10G_MIB,
    busy,
    clean_runtime,  # noqa: F401 - the `runtime` fixture
    query,
    running,
    served_runtime,  # noqa: F401 - the `local` fixture
    train,
    wait_for,
)

from spotrun.cli.app import app  # noqa: E402
from spotrun.local.control_api import ControlApi  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the fake finds training through /proc")
runner = CliRunner()


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
