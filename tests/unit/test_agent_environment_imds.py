"""A simulated instance's agent waits for its IMDS as long as a loaded machine needs, not botocore's 1 s once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from spotrun.local.instances.agent_environment import agent_environment


def test_the_agent_retries_its_instance_metadata_with_a_wider_timeout():
    # Given a simulated instance with its own IMDS
    sim = SimpleNamespace(
        imds=SimpleNamespace(endpoint="http://127.0.0.1:1234"),
        nvme_dir=Path("/nvme"),
        gpus=SimpleNamespace(bin_dir=Path("/instance/bin")),
    )

    # When its agent's environment is made
    env = agent_environment(sim, {}, "http://api", "cmd-1", {})  # type: ignore[arg-type]

    # Then botocore's instance-metadata provider (its role session) tries more than once, for longer than 1 s:
    # the emulator's IMDS answers from the runtime's process, which a loaded machine can keep busy past that
    assert int(env["AWS_METADATA_SERVICE_NUM_ATTEMPTS"]) >= 3
    assert int(env["AWS_METADATA_SERVICE_TIMEOUT"]) >= 5
    assert env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] == "http://127.0.0.1:1234"
