"""The GPU instances' side: their role and profile, the two launch templates, and the agent's SSM document.

A launch template is what ``acquire`` names in every CreateFleet request; its user data installs the agent
from an S3 asset built from this repository and assembles the instance-store NVMe at ``/mnt/nvme``. The EFA
template is the same template with an Elastic Fabric Adapter as the instance's network interface, for the
multi-node groups whose every candidate type offers one (:func:`spotrun.model.capacity.group_launch.
group_launch_template`): a fleet request names one template, and EC2 refuses an EFA on a type without one.
"""

from __future__ import annotations

from typing import cast

import jsii
from aws_cdk import Aws, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.constructs.control_plane.bundling import agent_trees, bundled
from infra.constructs.control_plane.functions import RUNTIME
from infra.nag import acknowledge
from infra.options import StackOptions
from spotrun.model.agent_protocol import session_policy
from spotrun.shape import METRICS_NAMESPACE, REPO_ROOT, DeploymentShape

NVME_ROOT = "/mnt/nvme"
USER_DATA_TEMPLATE = REPO_ROOT / "infra" / "assets" / "user_data.sh"
SSM_CORE_POLICY = "AmazonSSMManagedInstanceCore"


def machine_image(options: StackOptions, user_data: ec2.UserData) -> ec2.IMachineImage:
    """The instances' image: ``options.ami_id`` as it is, else the AMI id the SSM parameter holds at deploy time.

    Parameters
    ----------
    options
        The deployment's options (validated: at most one of the two is given).
    user_data
        The bootstrap script the image boots with.

    Returns
    -------
    ec2.IMachineImage
        For the launch template.
    """
    if options.ami_id is not None:
        return _FixedImage(options.ami_id, user_data)
    return ec2.MachineImage.from_ssm_parameter(options.ami_ssm_parameter, user_data=user_data)


@jsii.implements(ec2.IMachineImage)
class _FixedImage:
    """One AMI id, whatever the region: a custom image lives in the deployment's region.

    ``MachineImage.generic_linux`` wants a region -> id map, which an environment-agnostic stack would turn into a
    lookup that fails in every other region; an explicit id is the deployer's statement of where it deploys.
    """

    def __init__(self, ami_id: str, user_data: ec2.UserData):
        self._ami_id = ami_id
        self._user_data = user_data

    def get_image(self, scope: Construct) -> ec2.MachineImageConfig:
        del scope  # the id does not depend on where the template is used
        return ec2.MachineImageConfig(
            image_id=self._ami_id, os_type=ec2.OperatingSystemType.LINUX, user_data=self._user_data
        )


class Instances(Construct):
    """Instance role and profile, the agent asset, the launch template and the SSM document.

    Attributes
    ----------
    role
        The instances' role.
    launch_template, launch_template_name
        The template fleet requests launch from, and its name.
    efa_launch_template, efa_launch_template_name
        The same template with an EFA (InterfaceType ``efa``) as network interface 0, and its name.
    document
        The agent's SSM Command document.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        options: StackOptions,
        security_group: ec2.ISecurityGroup,
        shape: DeploymentShape,
        credentials_url: str,
    ):
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="spotrun GPU instances: SSM, the agent's report and credentials routes, GPU metrics",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(SSM_CORE_POLICY)],
        )
        acknowledge(
            self.role,
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{SSM_CORE_POLICY}]",
            "AWS's managed policy for the SSM Agent's core functions (Run Command is how the control plane "
            "reaches the instance), kept current by AWS with the agent's needs; it also lets the instance read "
            "the account's SSM parameters (ssm:GetParameter*), so spotrun keeps nothing in Parameter Store",
        )
        self.profile = iam.InstanceProfile(self, "Profile", role=self.role)
        # No S3 statement on the jobs bucket or the data buckets: the agent's S3 credentials are its job's, a
        # session of the job-access role narrowed to that job (infra.constructs.iam.job_access), from the API.
        # The agent's GPU metrics, in spotrun's namespace only (the emulator's instance role holds the same).
        for statement in session_policy.instance_metrics_statements(METRICS_NAMESPACE):
            self.role.add_to_policy(iam.PolicyStatement.from_json(statement))
        agent = s3_assets.Asset(self, "AgentPackage", **bundled(agent_trees(), RUNTIME.bundling_image))
        # The one object, not the whole (shared) CDK asset bucket that `agent.grant_read` would open.
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[f"arn:{Aws.PARTITION}:s3:::{agent.s3_bucket_name}/{agent.s3_object_key}"],
            )
        )
        # Named (after the stack, so two stacks never collide): fleet requests name the template.
        self.launch_template_name = f"{Stack.of(self).stack_name}-agent"
        self.efa_launch_template_name = f"{Stack.of(self).stack_name}-agent-efa"
        user_data = self._user_data(agent, credentials_url)
        self.launch_template = self._launch_template(
            "LaunchTemplate", self.launch_template_name, options, user_data, security_group, efa=False
        )
        self.efa_launch_template = self._launch_template(
            "EfaLaunchTemplate", self.efa_launch_template_name, options, user_data, security_group, efa=True
        )
        self.document = ssm.CfnDocument(
            self,
            "AgentDocument",
            name=shape.agent_document_name,
            document_type="Command",
            document_format="JSON",
            content=shape.agent_document(),
            # A changed document becomes a new version of the same name instead of a replacement.
            update_method="NewVersion",
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5[Resource::*]",
            "cloudwatch:PutMetricData has no resource-level permissions; it is limited to the spotrun namespace "
            "by the cloudwatch:namespace condition",
        )

    def grant_agent_routes(self, agent_route_arns: list[str]) -> None:
        """Let the agent call the API's agent routes, and nothing else of the API; no Step Functions action.

        The instance never holds a task token: the API function answers the workflow once it has checked that
        the signing instance runs the job's open attempt (:mod:`spotrun.control.agent_reports`), and answers
        its job's S3 credentials on the same check (:mod:`spotrun.control.job_credentials`). A policy of its
        own rather than a statement in the role's default policy, which the launch template waits for.
        """
        iam.Policy(
            self,
            "AgentReports",
            roles=[self.role],
            statements=[iam.PolicyStatement(actions=["execute-api:Invoke"], resources=agent_route_arns)],
        )

    @staticmethod
    def _user_data(agent: s3_assets.Asset, credentials_url: str) -> ec2.UserData:
        script = (
            USER_DATA_TEMPLATE.read_text()
            .replace("@NVME_ROOT@", NVME_ROOT)
            .replace("@REGION@", Aws.REGION)
            .replace("@AGENT_URI@", agent.s3_object_url)
            .replace("@CREDENTIALS_URL@", credentials_url)
        )
        return ec2.UserData.custom(script)

    def _launch_template(
        self,
        construct_id: str,
        name: str,
        options: StackOptions,
        user_data: ec2.UserData,
        security_group: ec2.ISecurityGroup,
        *,
        efa: bool,
    ) -> ec2.LaunchTemplate:
        template = ec2.LaunchTemplate(
            self,
            construct_id,
            launch_template_name=name,
            machine_image=machine_image(options, user_data),
            user_data=user_data,
            instance_profile=self.profile,
            # A template that names network interfaces may not also name the instance's security groups: the
            # EFA template gives its group to the interface instead (below).
            security_group=None if efa else security_group,
            http_tokens=ec2.LaunchTemplateHttpTokens.REQUIRED,  # IMDSv2 only
            http_endpoint=True,
            # 2 hops: the agent may run in a container on the instance and still reach IMDS.
            http_put_response_hop_limit=2,
            instance_metadata_tags=False,
            block_devices=[
                ec2.BlockDevice(
                    device_name=options.root_device_name,
                    volume=ec2.BlockDeviceVolume.ebs(
                        options.root_volume_gib,
                        encrypted=True,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        delete_on_termination=True,
                    ),
                )
            ],
            # A spot instance that shuts itself down must not linger as a stopped instance.
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
        )
        if efa:
            # The L2 construct has no network interface property. No SubnetId: each fleet override names the
            # subnet, as with the plain template (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
            # efa-working-with.html: an EFA is attached at launch, as network interface 0 here).
            cfn_template = cast(ec2.CfnLaunchTemplate, template.node.default_child)
            cfn_template.add_property_override(
                "LaunchTemplateData.NetworkInterfaces",
                [{"DeviceIndex": 0, "InterfaceType": "efa", "Groups": [security_group.security_group_id]}],
            )
        return template
