"""The instances' image as a deployment option: a preset, an SSM parameter or an explicit AMI id, checked where
the option is read, and what the synthesized launch template launches; and the job's interpreter on its PATH."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from aws_cdk import App, Stack, assertions
from aws_cdk import aws_ec2 as ec2

from infra.constructs.compute.instances import USER_DATA_TEMPLATE, Instances
from infra.options import DLAMI_PARAMETER, PYTORCH_DLAMI_PARAMETER, OptionError, StackOptions
from spotrun.shape import SHAPE


def options_of(context: dict[str, object]) -> StackOptions:
    return StackOptions.from_context(App(context=context).node)


def test_the_image_defaults_to_the_base_dlami_and_a_preset_names_the_pytorch_one():
    # Given / When
    default = options_of({})
    pytorch = options_of({"ami_ssm_parameter": "dlami-pytorch"})
    own = options_of({"ami_ssm_parameter": "/my-team/images/train/latest"})

    # Then
    assert (default.ami_ssm_parameter, default.ami_id) == (DLAMI_PARAMETER, None)
    assert pytorch.ami_ssm_parameter == PYTORCH_DLAMI_PARAMETER
    assert re.fullmatch(
        r"/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2\.\d+-ubuntu-24\.04/latest/ami-id",
        PYTORCH_DLAMI_PARAMETER,
    )
    assert own.ami_ssm_parameter == "/my-team/images/train/latest"


@pytest.mark.parametrize(
    ("context", "fragment"),
    [
        pytest.param(
            {"ami_id": "ami-0123456789abcdef0", "ami_ssm_parameter": DLAMI_PARAMETER},
            "give one of them",
            id="both, even the default parameter",
        ),
        pytest.param(
            {"ami_id": "ami-0123456789abcdef0", "ami_ssm_parameter": "dlami-pytorch"},
            "give one of them",
            id="both, a preset",
        ),
        pytest.param({"ami_id": "ami-12345"}, "ami_id: 'ami-12345' is not an AMI id", id="bad id"),
        pytest.param(
            {"ami_ssm_parameter": "pytorch"}, "neither a preset (dlami-base, dlami-pytorch)", id="typo"
        ),
    ],
)
def test_an_image_option_that_cannot_be_used_is_refused_naming_it(context, fragment):
    # Given / When / Then
    with pytest.raises(OptionError, match=re.escape(fragment)):
        options_of(context)


def test_options_built_in_code_refuse_both_images_too():
    # Given / When / Then: not only context goes through the check (the app's tests build options directly)
    with pytest.raises(OptionError, match="give one of them"):
        StackOptions(ami_id="ami-0123456789abcdef0", ami_ssm_parameter="dlami-pytorch")


def launch_template(options: StackOptions) -> dict:
    stack = Stack(App(), "Images")
    group = ec2.SecurityGroup(stack, "Group", vpc=ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0))
    Instances(
        stack, "Instances", options=options, security_group=group, shape=SHAPE, credentials_url="https://x/y"
    )
    template = assertions.Template.from_stack(stack).to_json()
    # The plain template and the EFA one launch the same image.
    plain, efa = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    assert (
        plain["Properties"]["LaunchTemplateData"]["ImageId"]
        == efa["Properties"]["LaunchTemplateData"]["ImageId"]
    )
    return {
        "data": plain["Properties"]["LaunchTemplateData"],
        "parameters": template.get("Parameters", {}),
    }


def test_the_deployed_stacks_launch_template_launches_the_base_dlami_by_default(synthesized):
    # Given the whole stack, synthesized without context
    templates = [synthesized.launch_template(efa=efa)[1] for efa in (False, True)]

    # When the image of each launch template is followed to the parameter it names
    (reference,) = {template["Properties"]["LaunchTemplateData"]["ImageId"]["Ref"] for template in templates}

    # Then CloudFormation resolves the base DLAMI's public parameter at deploy time
    parameter = synthesized.template["Parameters"][reference]
    assert parameter["Default"] == DLAMI_PARAMETER
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"


def test_the_launch_template_launches_the_explicit_image_or_the_parameters():
    # Given the instances' construct synthesized with an explicit AMI id, and with the PyTorch preset
    explicit = launch_template(StackOptions(ami_id="ami-0123456789abcdef0"))
    preset = launch_template(StackOptions(ami_ssm_parameter="dlami-pytorch"))

    # Then the first launches that image as it is, reading no parameter; the second the parameter's image,
    # resolved by CloudFormation at deploy time
    assert explicit["data"]["ImageId"] == "ami-0123456789abcdef0"
    assert not [p for p in explicit["parameters"].values() if "AWS::EC2::Image::Id" in p["Type"]]
    reference = preset["data"]["ImageId"]["Ref"]
    assert preset["parameters"][reference]["Default"] == PYTORCH_DLAMI_PARAMETER
    assert preset["parameters"][reference]["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"


# -- the job's interpreter: the user data's section, run with bash ------------------------------------------


def job_interpreter(tmp_path: Path, *, pytorch: bool) -> str:
    """Run the user data's job-interpreter section in ``tmp_path``; return the PATH it writes into agent.env."""
    script = USER_DATA_TEMPLATE.read_text()
    section = script[script.index("# --- the job's interpreter") : script.index('touch "$READY"')]
    venv = tmp_path / "pytorch"
    if pytorch:
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("#!/bin/sh\n")
        (venv / "bin" / "python").chmod(0o755)
    # A stand-in for the image's Python: `$PYTHON -m venv DIR` makes DIR/bin, as the real one would.
    stand_in = tmp_path / "python3.12"
    stand_in.write_text('#!/bin/sh\nmkdir -p "$3/bin"\n')
    stand_in.chmod(0o755)
    section = section.replace("PYTORCH_VENV=/opt/pytorch", f"PYTORCH_VENV={venv}")
    env = {"PATH": "/usr/bin:/bin", "HOME_DIR": str(tmp_path / "home"), "PYTHON": str(stand_in)}
    (tmp_path / "home").mkdir()
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f"NVME_ROOT=/mnt/nvme\n{section}"],
        env=env,
        check=True,
        cwd=tmp_path,
    )
    lines = (tmp_path / "home" / "agent.env").read_text().splitlines()
    [path] = [line.removeprefix("PATH=") for line in lines if line.startswith("PATH=")]
    return path


def test_the_job_runs_the_pytorch_amis_venv_when_the_image_has_it(tmp_path):
    # Given / When
    path = job_interpreter(tmp_path, pytorch=True)

    # Then its python and pip come first, before the system's
    assert path.split(os.pathsep)[0] == str(tmp_path / "pytorch" / "bin")
    assert path.endswith("/usr/bin:/bin")


def test_the_job_gets_a_venv_of_its_own_on_an_image_without_one(tmp_path):
    # Given / When
    path = job_interpreter(tmp_path, pytorch=False)

    # Then a venv made for the job comes first: setup's pip installs there, not into the image's Python
    assert path.split(os.pathsep)[0] == str(tmp_path / "home" / "job-venv" / "bin")
    assert (tmp_path / "home" / "job-venv" / "bin").is_dir()
