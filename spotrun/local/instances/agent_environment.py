"""What a simulated instance's agent process is started with: its environment, as on EC2.

On EC2 the SSM Agent runs the document's script with the instance's environment; the agent finds its role
session through the instance metadata service and its job's credentials route in the environment the user data
writes. The emulator gives each agent subprocess the same view, pointing at that instance's own IMDS. The
programs it starts are :mod:`spotrun.local.instances.agent_programs`'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from spotrun.local.instances.instance import SimulatedInstance
from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH
from spotrun.shape import REPO_ROOT

# The runtime's own credentials: an agent must not inherit them, since it acts as its instance only.
_RUNTIME_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
# What the control plane's functions are configured with (their settings, Powertools', moto's): an instance's
# environment holds none of it on EC2, where the user data writes only the agent's own variables
# (infra/assets/user_data.sh), so neither may the agent's or the training command's here. The agent's own knobs
# (SPOTRUN_AGENT_*) pass, as the user data could set them.
_CONTROL_PLANE_PREFIXES = ("SPOTRUN_", "POWERTOOLS_", "MOTO_")
_AGENT_PREFIX = "SPOTRUN_AGENT_"


def _instance_visible(name: str) -> bool:
    return name.startswith(_AGENT_PREFIX) or not name.startswith(_CONTROL_PLANE_PREFIXES)


def agent_environment(
    sim: SimulatedInstance,
    base: Mapping[str, str],
    api_url: str,
    command_id: str,
    parameters: Mapping[str, str],
) -> dict[str, str]:
    """The environment of the agent process one SSM command starts on ``sim``.

    Parameters
    ----------
    sim
        The simulated instance.
    base
        The runtime's process environment: its endpoint and region pass (the emulator's endpoint stands for
        AWS's), the control plane's settings do not.
    api_url
        The local API Gateway stand-in's URL ("" when the deployment has no API).
    command_id
        The SSM command's id.
    parameters
        The document's ENV_VAR parameters (``SSM_commandUri``), as the SSM Agent sets them.

    Returns
    -------
    dict[str, str]
        The variables, without the runtime's own credentials and the control plane's configuration.
    """
    python_path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **{name: value for name, value in base.items() if _instance_visible(name)},
        # The instance's own role session, from its IMDS as on EC2 (botocore's instance-metadata provider), not
        # the runtime's credentials: the API stand-in names the caller after the instance.
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": sim.imds.endpoint,
        # botocore asks IMDS once, for 1 s, by default (AWS SDKs reference guide, "Amazon EC2 instance metadata":
        # https://docs.aws.amazon.com/sdkref/latest/guide/feature-ec2-instance-metadata.html); this IMDS answers
        # from the runtime's process, which a loaded machine can keep busy longer than EC2's own ever is.
        "AWS_METADATA_SERVICE_NUM_ATTEMPTS": "3",
        "AWS_METADATA_SERVICE_TIMEOUT": "5",
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_CONFIG_FILE": os.devnull,
        "SPOTRUN_NVME_ROOT": str(sim.nvme_dir),
        "SPOTRUN_IMDS_ENDPOINT": sim.imds.endpoint,
        # As the user data writes it into the agent's environment on EC2: where its job's S3 credentials are.
        "SPOTRUN_AGENT_CREDENTIALS_URL": f"{api_url}{AGENT_CREDENTIALS_PATH}" if api_url else "",
        "SPOTRUN_LOCAL_COMMAND_ID": command_id,
        # The instances' private addresses are loopback ones (127.0.0.k, spotrun.local.instances.addresses): gloo
        # must bind the loopback interface, not the one the machine's hostname resolves to. Gloo reads the
        # interface from this variable (PyTorch, "Common environment variables":
        # https://docs.pytorch.org/docs/stable/distributed.html#common-environment-variables).
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONPATH": python_path,
        # The instance's nvidia-smi first (its GPUs, spotrun.local.instances.gpus), as the AMI's driver puts it on
        # PATH; then the user's command says `python`: that must be this interpreter, with spotrun importable.
        "PATH": os.pathsep.join(
            (str(sim.gpus.bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", ""))
        ),
        **parameters,
    }
    for name in _RUNTIME_CREDENTIALS:
        env.pop(name, None)
    return env
