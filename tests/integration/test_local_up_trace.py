"""`spotrun local up --trace FILE`: the pools' spot capacity and interruptions follow the trace; refusals first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.local.control_client import read_state
from spotrun.model.simulation.traces import dumps_trace
from spotrun.shape import REPO_ROOT
from tests.integration.test_local_control_up import launch_spot, local_json, wait_for

runner = CliRunner()
POOL = {"instance_type": "g5.xlarge", "availability_zone": "us-east-1a"}


def pool_row(workdir: Path, instance_type: str, zone: str) -> dict[str, object]:
    rows = local_json(workdir, "pools")["pools"]
    return next(r for r in rows if (r["instance_type"], r["availability_zone"]) == (instance_type, zone))


def instance_row(workdir: Path, instance_id: str) -> dict[str, object]:
    return next(i for i in local_json(workdir, "instances")["instances"] if i["instance_id"] == instance_id)


def test_local_up_with_a_trace_sets_the_pools_capacity_and_reclaims_on_a_drop(tmp_path: Path) -> None:
    # Given a trace with one spot instance for 8 ticks, then none, its ticks one real second apart
    # (10-minute ticks at 1/600 real seconds per trace second), driving one pool of `spotrun local up`
    trace = tmp_path / "drop.json"
    trace.write_text(dumps_trace(600, [1] * 8 + [0] * 200))
    workdir = tmp_path / "local"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    up = subprocess.Popen(
        [
            *(sys.executable, "-m", "spotrun.cli.app", "local", "up", "--state-dir", str(workdir)),
            *("--time-scale", "0.02", "--no-example", "--trace", str(trace)),
            *("--trace-scale", str(1 / 600), "--trace-pools", "g5.xlarge/us-east-1a"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        state = wait_for(
            lambda: (workdir / "local.json").exists() and read_state(workdir), 60, "the state file"
        )
        # When a spot instance is launched into the pool while the trace holds one, and the trace drops to zero
        before = pool_row(workdir, "g5.xlarge", "us-east-1a")["capacity"]
        untouched = pool_row(workdir, "g5.xlarge", "us-east-1b")["capacity"]
        instance_id = launch_spot(state)
        reclaimed = wait_for(
            lambda: (
                instance_row(workdir, instance_id)["state"] == "terminated"
                and instance_row(workdir, instance_id)
            ),
            30,
            "the trace's drop to reclaim the instance",
        )
        after = pool_row(workdir, "g5.xlarge", "us-east-1a")["capacity"]
        still = pool_row(workdir, "g5.xlarge", "us-east-1b")["capacity"]
    finally:
        up.send_signal(signal.SIGTERM)
        out, err = up.communicate(timeout=60)

    # Then the pool held the trace's one, then zero; the instance was reclaimed with a notice (not killed);
    # the pool the trace does not drive kept its own capacity; `up` said what drives the pools
    assert (before, after) == (1, 0)
    assert reclaimed["hung"] is False
    assert untouched == still != 0
    assert up.returncode == 0, err[-3000:]
    assert "spot capacity from the trace drop.json" in out


@pytest.mark.parametrize(
    ("files", "argv", "message"),
    [
        ({}, ["--trace", "{tmp}/missing.json"], "missing.json: cannot read"),
        ({"bad.json": "{not json"}, ["--trace", "{tmp}/bad.json"], "bad.json: not a spot trace"),
        (
            {"short.json": '{"metadata": {"gap_seconds": 0}, "data": [1]}'},
            ["--trace", "{tmp}/short.json"],
            "metadata.gap_seconds",
        ),
        ({"t.json": dumps_trace(600, [1, 0])}, ["--trace-scale", "0.01"], "need --trace FILE"),
        (
            {"t.json": dumps_trace(600, [1, 0])},
            ["--trace", "{tmp}/t.json", "--trace-pools", "g5.xlarge"],
            "'g5.xlarge' is not TYPE/ZONE",
        ),
        (
            {"t.json": dumps_trace(600, [1, 0])},
            ["--trace", "{tmp}/t.json", "--trace-pools", "g5.xlarge/mars-1a"],
            "no such spot pool in the emulator: g5.xlarge/mars-1a",
        ),
    ],
)
def test_local_up_refuses_a_trace_it_cannot_replay(
    tmp_path: Path, files: dict[str, str], argv: list[str], message: str
) -> None:
    # Given a trace file that is missing or not a trace, or trace options that make no replay
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # When `spotrun local up` is given it
    result = runner.invoke(
        app,
        [
            "local",
            "up",
            "--state-dir",
            str(tmp_path / "local"),
            "--no-example",
            *(a.format(tmp=tmp_path) for a in argv),
        ],
    )
    # Then it refuses, naming the file or option and the problem, and leaves no runtime behind
    assert result.exit_code == 1, result.output
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "local" / "local.json").exists()
