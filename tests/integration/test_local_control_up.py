"""`spotrun local up` as a user runs it: a process of its own, found by the chaos commands, stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.local.control_client import LocalState, read_state
from spotrun.shape import REPO_ROOT
from tests.sigv4 import signed_request

runner = CliRunner()


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def local_json(workdir: Path, *argv: str) -> Any:
    result = runner.invoke(app, ["local", *argv, "--state-dir", str(workdir), "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def launch_spot(state: LocalState) -> str:
    """One spot g5.xlarge through the emulator's EC2 endpoint, as any AWS client would launch it."""
    ec2 = boto3.client(
        "ec2",
        endpoint_url=state.endpoint_url,
        region_name=state.settings.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    reply = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": state.settings.launch_template_name},
                "Overrides": [{"InstanceType": "g5.xlarge", "SubnetId": state.settings.subnet_ids[0]}],
            }
        ],
    )
    return str(reply["Instances"][0]["InstanceIds"][0])


def test_local_up_serves_until_sigterm_and_the_chaos_commands_reach_it(tmp_path: Path) -> None:
    # Given `spotrun local up` started in a working directory, in a process of its own
    workdir = tmp_path / "local"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "spotrun.cli.app", "local", "up", "--state-dir", str(workdir)]
    up = subprocess.Popen(
        [*command, "--time-scale", "0.02", "--no-example"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        state = wait_for(
            lambda: (workdir / "local.json").exists() and read_state(workdir), 60, "the state file"
        )

        # When a spot instance is launched through its EC2 endpoint, then interrupted with `spotrun local`,
        # and a second `local up` is tried on the same directory
        instance_id = launch_spot(state)
        wait_for(
            lambda: any(
                i["instance_id"] == instance_id and i["state"] == "running"
                for i in local_json(workdir, "instances")["instances"]
            ),
            15,
            "the instance to boot",
        )
        answer = local_json(workdir, "interrupt", instance_id, "--notice-seconds", "20")
        wait_for(
            lambda: any(
                i["instance_id"] == instance_id and i["state"] == "terminated"
                for i in local_json(workdir, "instances")["instances"]
            ),
            15,
            "the interrupted instance to terminate",
        )
        second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
        # and its REST API is asked for the jobs, and for one that does not exist
        assert state.api_url is not None
        with urllib.request.urlopen(signed_request(f"{state.api_url}/jobs"), timeout=30) as reply:  # noqa: S310
            listing = json.loads(reply.read())
        try:
            urllib.request.urlopen(signed_request(f"{state.api_url}/jobs/nope-1"), timeout=30)  # noqa: S310
        except urllib.error.HTTPError as exc:
            missing = (exc.code, json.loads(exc.read()))
    finally:
        # ...and the first one gets SIGTERM
        up.send_signal(signal.SIGTERM)
        out, err = up.communicate(timeout=60)

    # Then the interruption reached the instance, the second `up` was refused, and the first one stopped
    # cleanly, removing its state file, after printing how to use it
    assert answer["terminates_in_real_seconds"] < 1
    assert second.returncode == 1
    assert "already runs" in second.stderr
    assert up.returncode == 0, err[-3000:]
    assert not (workdir / "local.json").exists()
    assert f"export AWS_ENDPOINT_URL={state.endpoint_url} " in out
    assert (
        f"aws s3 cp examples/tiny-regression/manifest.yaml s3://{state.settings.jobs_bucket}/manifests/"
        in out
    )
    assert f"interrupt {instance_id}" in out
    assert (
        f"curl -s --aws-sigv4 'aws:amz:us-east-1:execute-api' --user testing:testing {state.api_url}/jobs"
        in out
    )
    assert listing == {"jobs": [], "next_token": None}
    assert missing[0] == 404
    assert "nope-1" in missing[1]["message"]
    gone = runner.invoke(app, ["local", "instances", "--state-dir", str(workdir)])
    assert gone.exit_code == 1
    assert "no local runtime is running" in gone.stderr
