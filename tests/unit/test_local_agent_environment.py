"""A simulated instance's agent (and the training command it starts) sees only what an EC2 instance's would."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from spotrun.local.instances.agent_environment import agent_environment


def test_the_agent_inherits_none_of_the_control_planes_configuration():
    # Given the runtime's process environment: its endpoint and region, its own credentials, the functions'
    # settings (the jobs table, the state machine, the job-access role), Powertools' and moto's variables, and an
    # agent knob the user data could set
    sim = SimpleNamespace(
        imds=SimpleNamespace(endpoint="http://127.0.0.1:1234"),
        nvme_dir=Path("/nvme"),
        gpus=SimpleNamespace(bin_dir=Path("/instance/bin")),
    )
    base = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "SPOTRUN_JOBS_TABLE": "spotrun-jobs",
        "SPOTRUN_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:spotrun-job",
        "SPOTRUN_JOB_ACCESS_ROLE_ARN": "arn:aws:iam::123456789012:role/spotrun-local-job-access",
        "POWERTOOLS_SERVICE_NAME": "spotrun",
        "MOTO_PORT": "5000",
        "SPOTRUN_AGENT_WORKERS": "4",
        "HOME": "/home/user",
    }

    # When an agent's environment is made from it
    env = agent_environment(sim, base, "http://api", "cmd-1", {})  # type: ignore[arg-type]

    # Then none of the control plane's configuration nor the runtime's credentials pass: on EC2 the user data
    # writes only the agent's own variables
    for name in (
        "SPOTRUN_JOBS_TABLE",
        "SPOTRUN_STATE_MACHINE_ARN",
        "SPOTRUN_JOB_ACCESS_ROLE_ARN",
        "POWERTOOLS_SERVICE_NAME",
        "MOTO_PORT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ):
        assert name not in env, name
    # and the endpoint standing for AWS's, the region, the agent's own knobs and variables do
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5000"
    assert env["AWS_REGION"] == "us-east-1"
    assert env["SPOTRUN_AGENT_WORKERS"] == "4"
    assert env["SPOTRUN_NVME_ROOT"] == "/nvme"
    assert env["SPOTRUN_AGENT_CREDENTIALS_URL"].startswith("http://api")
    assert env["HOME"] == "/home/user"


def test_gloo_binds_the_loopback_interface_the_instances_addresses_are_on():
    # Given a runtime whose environment names another interface (what the machine's own gloo setting may be)
    sim = SimpleNamespace(
        imds=SimpleNamespace(endpoint="http://127.0.0.1:1234"),
        nvme_dir=Path("/nvme"),
        gpus=SimpleNamespace(bin_dir=Path("/instance/bin")),
    )

    # When an agent's environment is made
    env = agent_environment(sim, {"GLOO_SOCKET_IFNAME": "eth0"}, "", "cmd-1", {})  # type: ignore[arg-type]

    # Then gloo is told the loopback interface: each instance's private address is a 127.0.0.k
    assert env["GLOO_SOCKET_IFNAME"] == "lo"
