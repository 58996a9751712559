"""Handlers against moto (in-process ``mock_aws``): the resources of the deployment shape, created from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.runtime import reset
from spotrun.agent.transfer import integrity
from spotrun.aws.adapters import job_store
from spotrun.aws.settings import Settings
from spotrun.model.job.record import ManifestSource, new_job, utc_now
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.shape import SHAPE
from tests.lambda_context import FakeLambdaContext
from tests.lambda_context import lambda_context as make_lambda_context

EVENTS = Path(__file__).resolve().parent.parent / "events"
REGION = "us-east-1"
# The EFA launch template's one interface (the security group is left to moto's default here).
EFA_INTERFACE = [{"DeviceIndex": 0, "InterfaceType": "efa"}]


# The bucket the agent's tests work in (moto S3, with the `s3` fixture below).
AGENT_BUCKET = "spotrun-jobs-test"


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """The algorithms staging itself starts a hash of (``integrity.new_hash``)."""
    started: list[str] = []
    real = integrity.new_hash

    def counting(algorithm: Any) -> Any:
        made = real(algorithm)
        if made is not None:
            started.append(algorithm)
        return made

    monkeypatch.setattr(integrity, "new_hash", counting)
    return started


def corrupt_in_storage(bucket: str, key: str) -> None:
    """Flip a byte of moto's stored body (in this process), its stored checksum left as it was: bit rot, to S3."""
    from moto.s3.models import s3_backends

    from spotrun.local.server import ACCOUNT_ID

    stored: Any = s3_backends[ACCOUNT_ID]["aws"].get_object(bucket, key)
    body = bytearray(stored.value)
    body[len(body) // 2] ^= 0xFF
    stored.value = bytes(body)


@pytest.fixture
def s3(monkeypatch) -> Iterator[Any]:
    """A moto S3 client with :data:`AGENT_BUCKET` created, and no endpoint override in the environment."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=AGENT_BUCKET)
        yield client


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return make_lambda_context(region=REGION)


def load_event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def aws(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "spotrun",
        "POWERTOOLS_SERVICE_NAME": "spotrun",
        # moto's EC2 backend otherwise builds its catalogue of public images (about 1,300) at each test's first
        # EC2 call (about 0.4 s). Nothing here lists images; an instance launches from any image id without them.
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    # Each test is a new execution environment: its handlers read this test's settings, with fresh clients.
    reset()
    with mock_aws():
        yield
    reset()


@pytest.fixture
def deployment(aws, monkeypatch) -> Settings:
    """Tables, buckets, subnets, launch template and state machine, named as a deployment would."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    for table in SHAPE.tables:
        keys = [(table.partition_key, "HASH")] + ([(table.sort_key, "RANGE")] if table.sort_key else [])
        indexes = [
            {
                "IndexName": index,
                "KeySchema": [{"AttributeName": partition, "KeyType": "HASH"}]
                + ([{"AttributeName": sort, "KeyType": "RANGE"}] if sort else []),
                "Projection": {"ProjectionType": "ALL"},
            }
            for index, partition, sort in table.global_indexes
        ]
        attributes = [name for name, _ in keys] + [
            name for _, partition, sort in table.global_indexes for name in (partition, sort) if name
        ]
        dynamodb.create_table(
            TableName=f"spotrun-{table.logical_name}",
            KeySchema=[{"AttributeName": name, "KeyType": kind} for name, kind in keys],
            AttributeDefinitions=[
                {"AttributeName": name, "AttributeType": "S"} for name in dict.fromkeys(attributes)
            ],
            BillingMode="PAY_PER_REQUEST",
            **({"GlobalSecondaryIndexes": indexes} if indexes else {}),
        )
    s3 = boto3.client("s3", region_name=REGION)
    for bucket in SHAPE.buckets:
        s3.create_bucket(Bucket=f"spotrun-{bucket.logical_name}-test")
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=f"{REGION}{zone}")[
            "Subnet"
        ]["SubnetId"]
        for index, zone in enumerate("abc")
    ]
    for name, interfaces in (
        ("spotrun-agent", {}),
        ("spotrun-agent-efa", {"NetworkInterfaces": EFA_INTERFACE}),
    ):
        ec2.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData={
                "ImageId": "ami-12c6146b",
                "MetadataOptions": {"HttpTokens": "required"},
                **interfaces,
            },
        )
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    machine = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name="spotrun-job",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=role,
    )["stateMachineArn"]
    boto3.client("events", region_name=REGION).create_event_bus(Name="spotrun-events")
    boto3.client("scheduler", region_name=REGION).create_schedule_group(Name=SHAPE.schedule_group)
    settings = Settings(
        region=REGION,
        event_bus_name="spotrun-events",
        schedule_group=SHAPE.schedule_group,
        scheduler_role_arn=role,
        scheduled_run_arn=f"arn:aws:lambda:{REGION}:123456789012:function:spotrun-scheduled_run",
        jobs_table="spotrun-jobs",
        idempotency_table="spotrun-idempotency",
        jobs_bucket="spotrun-jobs-test",
        archive_bucket="spotrun-archive-test",
        state_machine_arn=machine,
        agent_document_name=SHAPE.agent_document_name,
        launch_template_name="spotrun-agent",
        efa_launch_template_name="spotrun-agent-efa",
        subnet_ids=tuple(subnets),
        # Names only: moto has no placement groups (the emulator adds them: spotrun.local.patches.ec2_placement).
        placement_group_names=tuple(f"spotrun-cluster-{REGION}{zone}" for zone in "abc"),
        time_scale=1.0,
        agent_report_url="https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/agent/reports",
        instance_role_name="spotrun-instances",
        job_access_role_arn="arn:aws:iam::123456789012:role/spotrun-job-access",
    )
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    return settings


def create_agent_document() -> None:
    """The SSM document the dispatch sends agent steps through (a stand-in for the stack's)."""
    boto3.client("ssm").create_document(
        Name=SHAPE.agent_document_name,
        DocumentType="Command",
        Content=json.dumps(
            {
                "schemaVersion": "2.2",
                "description": "run a spotrun agent step",
                "parameters": {"commandUri": {"type": "String"}},
                "mainSteps": [
                    {
                        "action": "aws:runShellScript",
                        "name": "run",
                        "inputs": {"runCommand": ["spotrun-agent run"]},
                    }
                ],
            }
        ),
    )


@pytest.fixture
def job_id(deployment):
    store = job_store(deployment.jobs_table, deployment.region)
    job = new_job(
        "tiny-000000000001",
        "tiny",
        ManifestSource(bucket="b", key="k", etag="e"),
        MANIFEST.model_dump(mode="json"),
        utc_now(),
    )
    assert store.create(job)
    create_agent_document()
    return job.job_id


MANIFEST = parse_manifest_text(
    """
name: tiny
resources: {gpu_names: [t4, a10g]}
training: {command: [python, train.py]}
outputs: {model: model.npy}
archive: {storage_class: DEEP_ARCHIVE}
"""
)


class FakeImds:
    """IMDSv2 on 127.0.0.1: tokens required, notices 404 until set."""

    def __init__(self) -> None:
        self.tokens: set[str] = set()
        self.documents: dict[str, str] = {
            "/latest/meta-data/instance-id": "i-0123456789abcdef0",
            "/latest/meta-data/instance-type": "g5.xlarge",
            "/latest/meta-data/placement/availability-zone": "us-east-1b",
            "/latest/meta-data/placement/region": "us-east-1",
        }
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                if self.path != "/latest/api/token" or not self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    return self._reply(400, "")
                token = f"t{len(fake.tokens)}"
                fake.tokens.add(token)
                return self._reply(200, token)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") not in fake.tokens:
                    return self._reply(401, "")
                body = fake.documents.get(self.path)
                return self._reply(404, "") if body is None else self._reply(200, body)

            def _reply(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set_instance_action(self, seconds_from_now: float) -> None:
        when = (datetime.now(UTC) + timedelta(seconds=seconds_from_now)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.documents["/latest/meta-data/spot/instance-action"] = json.dumps(
            {"action": "terminate", "time": when}
        )


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    fake = FakeImds()
    yield fake
    fake.server.shutdown()


# The example job the agent tests run, and a reference model from a direct run of it.
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tiny-regression"


@pytest.fixture(scope="module")
def example_data(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("example") / "data"
    subprocess.run(
        [sys.executable, str(EXAMPLE / "generate_data.py"), str(directory)], check=True, capture_output=True
    )
    return directory


@pytest.fixture(scope="module")
def reference_model(example_data, tmp_path_factory) -> bytes:
    """model.npy of an uninterrupted run of the example, run directly (no agent)."""
    work = tmp_path_factory.mktemp("reference")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--data-dir", str(example_data)],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
    )
    return (work / "output" / "model.npy").read_bytes()


@pytest.fixture
def published(deployment):
    """An SQS queue receiving every event of source spotrun on the bus; returns a drain function."""
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(QueueName="job-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events = boto3.client("events", region_name=REGION)
    events.put_rule(
        Name="all-job-events", EventBusName=deployment.event_bus_name, EventPattern='{"source": ["spotrun"]}'
    )
    events.put_targets(
        Rule="all-job-events", EventBusName=deployment.event_bus_name, Targets=[{"Id": "q", "Arn": queue_arn}]
    )

    def drain() -> list[dict]:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(message["Body"]) for message in messages]

    return drain
