"""Where the GPU instances run: private subnets with egress, a cluster placement group per subnet, and a security
group that admits only its own members.

The economical secure default is **private subnets behind one NAT gateway, plus a free S3 gateway endpoint**:

- instances get no public address and no inbound rule but one from their own security group (a multi-node
  job's nodes reach each other for torch's rendezvous and NCCL, as an EFA requires:
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security); the control plane
  reaches them through SSM, which the SSM agent dials out to;
- they need egress to S3, SSM, Step Functions, CloudWatch and PyPI (the agent is installed at boot). Interface
  endpoints for the five AWS services would cost about 5 x 2 AZ x $7/month (more than a NAT gateway) and still
  leave PyPI unreachable, so one NAT gateway carries the API traffic;
- the bulk of the bytes (datasets, checkpoints, models) goes to S3, which the gateway endpoint carries without
  NAT data-processing charges.

A cluster placement group lives in one Availability Zone
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html), so each subnet (one per zone) has
its own, which a multi-node group's fleet request names per override.

An existing VPC can be named with the context key ``vpc_id``; its private subnets with egress are used.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.options import StackOptions


class Network(Construct):
    """The VPC, the instances' subnets and their security group.

    Attributes
    ----------
    vpc
        The new or looked-up VPC.
    subnets
        The subnets spot requests may use (one per zone).
    placement_groups
        One cluster placement group per subnet, in the order of :attr:`subnets`.
    security_group
        The instances' group: in and out to its own members only, and HTTPS and HTTP out.
    """

    def __init__(self, scope: Construct, construct_id: str, *, options: StackOptions):
        super().__init__(scope, construct_id)
        if options.vpc_id:
            self.vpc: ec2.IVpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=options.vpc_id)
        else:
            self.vpc = self._new_vpc(options)
        self.subnets = self.vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, one_per_az=True
        ).subnets
        self.security_group = ec2.SecurityGroup(
            self,
            "InstanceSecurityGroup",
            vpc=self.vpc,
            description="spotrun GPU instances: inbound from each other only (else reached through SSM), web out",
            allow_all_outbound=False,
        )
        # All traffic between the group's members, both ways, and nothing else in: the only inbound rule. An EFA
        # needs exactly this pair (efa-start.html#efa-start-security, above); NCCL and torch's c10d store use
        # ports of their own choosing, so no narrower port range would do.
        self.security_group.add_ingress_rule(
            self.security_group, ec2.Port.all_traffic(), "from the instances' own group: a job's nodes"
        )
        self.security_group.add_egress_rule(
            self.security_group, ec2.Port.all_traffic(), "to the instances' own group: a job's nodes"
        )
        self.placement_groups = [
            ec2.PlacementGroup(self, f"ClusterPlacement{index}", strategy=ec2.PlacementGroupStrategy.CLUSTER)
            for index, _subnet in enumerate(self.subnets)
        ]
        # Every AWS API, the S3 gateway endpoint and PyPI are HTTPS; the OS package mirrors the bootstrap may need
        # are plain HTTP (their packages are signed). DNS and the time service are link-local, which security
        # groups do not filter.
        any_ipv4 = ec2.Peer.any_ipv4()
        self.security_group.add_egress_rule(any_ipv4, ec2.Port.tcp(443), "HTTPS to AWS APIs and PyPI")
        self.security_group.add_egress_rule(any_ipv4, ec2.Port.tcp(80), "HTTP to the OS package mirrors")

    def _new_vpc(self, options: StackOptions) -> ec2.Vpc:
        zones = list(options.availability_zones) or None
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr("10.42.0.0/16"),
            max_azs=None if zones else options.max_azs,
            nat_gateways=options.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                # Large private subnets: a multi-node job takes one address per node, and a burst of jobs many.
                ec2.SubnetConfiguration(
                    name="instances", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                ),
            ],
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)
            },
            availability_zones=zones,
        )
        flow_logs = logs.LogGroup(
            self, "FlowLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        # Rejected traffic only: it is what an investigation needs, at a fraction of the cost of ALL.
        vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )
        return vpc
