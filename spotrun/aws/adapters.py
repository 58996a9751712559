"""boto3 adapters of :mod:`spotrun.control.ports`, and the one place where clients are made."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from spotrun.aws.job_store import DynamoJobStore
from spotrun.model.agent_protocol.session_policy import SESSION_SECONDS, JobCredentials
from spotrun.model.capacity.fleet_errors import call_error_response
from spotrun.model.errors import InstanceLost
from spotrun.model.job.bus_events import SOURCE

_sessions: dict[str | None, boto3.session.Session] = {}
_clients: dict[tuple[str, str, str | None, str | None], Any] = {}
_lock = threading.Lock()
# Per thread: boto3 resources are not thread-safe (dynamodb_table). A thread's cache is dropped when the
# generation it was made in is no longer the current one (forget_clients cannot reach other threads' locals).
_thread_resources = threading.local()
_generation = [0]
# SendTask* answers these when the task already ended (reported, timed out, or its execution stopped).
_CLOSED_TASK_CODES = frozenset({"TaskDoesNotExist", "TaskTimedOut", "InvalidToken"})
_RETRIES = Config(retries={"max_attempts": 5, "mode": "standard"})


def _session(endpoint: str | None) -> boto3.session.Session:
    # One session per endpoint, made once: building one loads botocore's data files again (tens of ms). A session
    # is not thread-safe, so it is only used under _lock, to make clients and resources.
    if endpoint not in _sessions:
        _sessions[endpoint] = boto3.session.Session()
    return _sessions[endpoint]


def client(service: str, region: str, *, signature_version: str | None = None) -> Any:
    """A cached boto3 client: every client of the Lambda functions and their adapters comes from here.

    Clients are made on first use, never at import. The cache is keyed by the endpoint too, because the
    embedded runtime points ``AWS_ENDPOINT_URL`` at a new emulator in each test. (The instance agent is another
    process, with larger connection pools and more retries: :func:`spotrun.agent.step_runner.aws_client`.)
    """
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    key = (service, region, endpoint, signature_version)
    config = _RETRIES.merge(Config(signature_version=signature_version)) if signature_version else _RETRIES
    with _lock:
        if key not in _clients:
            _clients[key] = _session(endpoint).client(service, region_name=region, config=config)  # type: ignore[call-overload]
        return _clients[key]


def dynamodb_table(name: str, region: str) -> Any:
    """A DynamoDB ``Table`` resource on this thread's DynamoDB service resource, made once per thread.

    A service resource makes a client of its own (tens of ms, and a copy of the session's event hooks), and
    "resource instances are not thread safe and should not be shared across threads or processes"
    (https://boto3.amazonaws.com/v1/documentation/api/latest/guide/resources.html#multithreading-or-multiprocessing-with-resources):
    so one per thread, endpoint and region, and a new (cheap) ``Table`` on each call.
    """
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if getattr(_thread_resources, "generation", None) != _generation[0]:  # forget_clients ran since
        _thread_resources.generation = _generation[0]
        _thread_resources.dynamodb = {}
    resources: dict[tuple[str, str | None], Any] = _thread_resources.dynamodb
    key = (region, endpoint)
    if key not in resources:
        with _lock:
            resources[key] = _session(endpoint).resource("dynamodb", region_name=region, config=_RETRIES)
    return resources[key].Table(name)


class Ec2Compute:
    """:class:`spotrun.control.ports.Compute` on EC2."""

    def __init__(self, region: str):
        self._ec2 = client("ec2", region)

    def subnet_zones(self, subnet_ids: tuple[str, ...]) -> dict[str, str]:
        subnets = self._ec2.describe_subnets(SubnetIds=list(subnet_ids))["Subnets"]
        return {subnet["SubnetId"]: subnet["AvailabilityZone"] for subnet in subnets}

    def create_fleet(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            return dict(self._ec2.create_fleet(**request))
        except ClientError as exc:
            # A call EC2 refuses as a whole (no such launch template, access denied, a quota) carries the same
            # codes as an instant fleet's per-pool Errors: read both the same way.
            error = exc.response.get("Error", {})
            return call_error_response(str(error.get("Code", "Unknown")), str(error.get("Message", "")))

    def spot_price(self, instance_type: str, availability_zone: str) -> float | None:
        history = self._ec2.describe_spot_price_history(
            InstanceTypes=[instance_type],
            AvailabilityZone=availability_zone,
            ProductDescriptions=["Linux/UNIX"],
            MaxResults=10,
        )["SpotPriceHistory"]
        # Filter again: an emulator may ignore the zone filter, and the latest entry is the price now.
        in_zone = [entry for entry in history if entry["AvailabilityZone"] == availability_zone]
        if not in_zone:
            return None
        return float(max(in_zone, key=lambda entry: entry["Timestamp"])["SpotPrice"])

    def spot_prices(self, instance_types: list[str]) -> dict[tuple[str, str], float]:
        # One paginated query for every type and zone instead of one call per pool (the plan answers within API
        # Gateway's 29 s). With StartTime = EndTime = now, EC2 "returns the last price change before the start
        # time, which is the effective price as of the start time" (DescribeSpotPriceHistory,
        # https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html).
        if not instance_types:
            return {}
        now = datetime.now(UTC)
        latest: dict[tuple[str, str], tuple[Any, float]] = {}
        pages = self._ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=instance_types,
            ProductDescriptions=["Linux/UNIX"],
            StartTime=now,
            EndTime=now,
        )
        for page in pages:
            for entry in page["SpotPriceHistory"]:
                key = (entry["InstanceType"], entry["AvailabilityZone"])
                if key not in latest or entry["Timestamp"] > latest[key][0]:
                    latest[key] = (entry["Timestamp"], float(entry["SpotPrice"]))
        return {key: price for key, (_when, price) in latest.items()}

    def instance_state(self, instance_id: str) -> str | None:
        try:
            reservations = self._ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as exc:
            if exc.response["Error"]["Code"].startswith("InvalidInstanceID"):
                return None
            raise
        for reservation in reservations:
            for instance in reservation["Instances"]:
                return str(instance["State"]["Name"])
        return None

    def private_ips(self, instance_ids: list[str]) -> dict[str, str]:
        if not instance_ids:
            return {}
        try:
            reservations = self._ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
        except ClientError as exc:
            if not exc.response["Error"]["Code"].startswith("InvalidInstanceID") or len(instance_ids) == 1:
                if exc.response["Error"]["Code"].startswith("InvalidInstanceID"):
                    return {}
                raise
            # One id not visible yet fails the whole call (eventual consistency): ask for each alone.
            return {k: v for instance_id in instance_ids for k, v in self.private_ips([instance_id]).items()}
        return {
            instance["InstanceId"]: str(instance["PrivateIpAddress"])
            for reservation in reservations
            for instance in reservation["Instances"]
            if instance.get("PrivateIpAddress")
        }

    def terminate(self, instance_ids: list[str]) -> list[str]:
        if not instance_ids:
            return []
        try:
            answer = self._ec2.terminate_instances(InstanceIds=instance_ids)
        except ClientError as exc:
            if not exc.response["Error"]["Code"].startswith("InvalidInstanceID"):
                raise
            if len(instance_ids) == 1:
                return []
            # One unknown id fails the whole call: fall back to one call per instance.
            return [accepted for instance_id in instance_ids for accepted in self.terminate([instance_id])]
        return [item["InstanceId"] for item in answer["TerminatingInstances"]]


class SsmCommands:
    """:class:`spotrun.control.ports.Commands` on SSM Run Command."""

    def __init__(self, region: str):
        self._ssm = client("ssm", region)

    def run_agent(self, document_name: str, instance_id: str, command_uri: str) -> str:
        try:
            answer = self._ssm.send_command(
                DocumentName=document_name,
                InstanceIds=[instance_id],
                Parameters={"commandUri": [command_uri]},
                TimeoutSeconds=600,
                Comment="spotrun agent step",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "InvalidInstanceId":
                # Gone (reclaimed) or not managed by SSM: the workflow relaunches rather than fails.
                raise InstanceLost(f"SSM cannot reach instance {instance_id}: {exc}") from exc
            raise
        return str(answer["Command"]["CommandId"])

    def agent_online(self, instance_id: str) -> bool:
        # SendCommand answers InvalidInstanceId until the SSM agent has registered; DescribeInstanceInformation
        # lists a node once it is managed, with PingStatus Online while its agent is connected. Before
        # registration it lists nothing (or, with an id SSM does not know, answers InvalidInstanceId).
        # https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_DescribeInstanceInformation.html
        try:
            answer = self._ssm.describe_instance_information(
                Filters=[{"Key": "InstanceIds", "Values": [instance_id]}]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "InvalidInstanceId":
                return False
            raise
        return any(
            item.get("InstanceId") == instance_id and item.get("PingStatus") == "Online"
            for item in answer.get("InstanceInformationList", [])
        )


class CloudWatchLogEvents:
    """:class:`spotrun.control.ports.LogEvents` on CloudWatch Logs' CreateLogStream and GetLogEvents."""

    def __init__(self, region: str):
        self._logs = client("logs", region)

    def create_stream(self, group: str, stream: str) -> None:
        try:
            self._logs.create_log_stream(logGroupName=group, logStreamName=stream)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceAlreadyExistsException":
                raise

    def read(
        self, group: str, stream: str, *, token: str | None, limit: int, from_head: bool
    ) -> tuple[list[str], str] | None:
        arguments: dict[str, Any] = {
            "logGroupName": group,
            "logStreamName": stream,
            "limit": limit,
            "startFromHead": from_head,
        }
        if token:
            arguments["nextToken"] = token
        try:
            answer = self._logs.get_log_events(**arguments)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":  # not created yet, or expired
                return None
            raise
        return [str(event["message"]) for event in answer["events"]], str(answer["nextForwardToken"])


class StsJobAccess:
    """:class:`spotrun.control.ports.JobAccess` on STS: the job-access role, narrowed by a session policy.

    The API function's role session assumes the role (role chaining), so a session lasts at most an hour
    (:data:`spotrun.model.agent_protocol.session_policy.SESSION_SECONDS`).
    """

    def __init__(self, role_arn: str, region: str):
        self._role_arn = role_arn
        self._sts = client("sts", region)

    def credentials(self, session_name: str, session_policy: str) -> JobCredentials:
        answer = self._sts.assume_role(
            RoleArn=self._role_arn,
            RoleSessionName=session_name,
            Policy=session_policy,
            DurationSeconds=SESSION_SECONDS,
        )["Credentials"]
        return JobCredentials(
            access_key_id=answer["AccessKeyId"],
            secret_access_key=answer["SecretAccessKey"],
            session_token=answer["SessionToken"],
            expiration=answer["Expiration"],
        )


class StepFunctionsWorkflows:
    """:class:`spotrun.control.ports.Workflows` on Step Functions."""

    def __init__(self, region: str):
        self._sfn = client("stepfunctions", region)

    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> str:
        try:
            answer = self._sfn.start_execution(
                stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload)
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ExecutionAlreadyExists":
                raise
            # Same name: this submission's execution exists already. Its ARN is derivable from the name.
            return state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"
        return str(answer["executionArn"])

    def fail_task(self, task_token: str, error: str, cause: str) -> bool:
        return self._answer("send_task_failure", taskToken=task_token, error=error, cause=cause)

    def send_success(self, task_token: str, output: str) -> bool:
        return self._answer("send_task_success", taskToken=task_token, output=output)

    def send_heartbeat(self, task_token: str) -> bool:
        return self._answer("send_task_heartbeat", taskToken=task_token)

    def _answer(self, operation: str, **arguments: Any) -> bool:
        try:
            getattr(self._sfn, operation)(**arguments)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code in _CLOSED_TASK_CODES:
                return False
            # "from None", the code only: Step Functions' message may quote the token back.
            raise RuntimeError(f"{operation} failed: {code}") from None
        return True

    def stop(self, execution_arn: str, cause: str) -> bool:
        try:
            status = self._sfn.describe_execution(executionArn=execution_arn)["status"]
            if status != "RUNNING":
                return False
            self._sfn.stop_execution(executionArn=execution_arn, error="Job.Cancelled", cause=cause)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ExecutionDoesNotExist":
                return False
            raise
        return True


class EventBridgeEvents:
    """:class:`spotrun.control.ports.Events` on one EventBridge bus."""

    def __init__(self, bus_name: str, region: str):
        self._bus = bus_name
        self._events = client("events", region)

    def publish(self, detail_type: str, detail: dict[str, Any]) -> None:
        entry = {
            "Source": SOURCE,
            "DetailType": detail_type,
            "Detail": json.dumps(detail),
            "EventBusName": self._bus,
        }
        answer = self._events.put_events(Entries=[entry])
        if answer.get("FailedEntryCount"):
            raise RuntimeError(f"EventBridge refused the event: {answer['Entries'][0].get('ErrorMessage')}")


def job_store(table_name: str, region: str, event_bus_name: str = "") -> DynamoJobStore:
    """The job store on its DynamoDB table, publishing status changes on ``event_bus_name`` when one is given."""
    events = EventBridgeEvents(event_bus_name, region) if event_bus_name else None
    return DynamoJobStore(dynamodb_table(table_name, region), events)


def forget_clients() -> None:
    """Drop cached sessions and clients (:func:`functions.runtime.reset`, for tests, calls this)."""
    with _lock:
        _clients.clear()
        _sessions.clear()
        _generation[0] += 1
