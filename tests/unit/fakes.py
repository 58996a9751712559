"""In-memory fakes of spotrun.control.ports, for unit tests of the control plane's logic."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any


class FakeCompute:
    """EC2 with unlimited capacity: every fleet gets its first override."""

    def __init__(self, zones: dict[str, str] | None = None, price: float | None = 0.2):
        self.zones = zones or {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}
        self.price = price
        self.states: dict[str, str] = {}
        self.fleet_requests: list[dict[str, Any]] = []
        self.unavailable = False
        self.error_code = "InsufficientInstanceCapacity"  # what every pool answers while unavailable
        # Ids EC2 answers NotFound for, in DescribeInstances and TerminateInstances (eventual consistency):
        # the instance exists and runs, terminate does nothing.
        self.invisible: set[str] = set()
        self._ids = (f"i-{n:017x}" for n in itertools.count(1))

    def subnet_zones(self, subnet_ids: tuple[str, ...]) -> dict[str, str]:
        return {subnet: zone for subnet, zone in self.zones.items() if subnet in subnet_ids}

    def create_fleet(self, request: dict[str, Any]) -> dict[str, Any]:
        self.fleet_requests.append(request)
        config = request["LaunchTemplateConfigs"][0]
        lifecycle = request["TargetCapacitySpecification"]["DefaultTargetCapacityType"]
        if self.unavailable:
            errors = [
                {
                    "LaunchTemplateAndOverrides": {"Overrides": override},
                    "Lifecycle": lifecycle,
                    "ErrorCode": self.error_code,
                    "ErrorMessage": f"{self.error_code} (fake)",
                }
                for override in config["Overrides"]
            ]
            return {"Instances": [], "Errors": errors}
        override = config["Overrides"][0]
        instance_id = next(self._ids)
        self.states[instance_id] = "pending"
        return {
            "Instances": [
                {
                    "LaunchTemplateAndOverrides": {"Overrides": override},
                    "Lifecycle": lifecycle,
                    "InstanceIds": [instance_id],
                    "InstanceType": override["InstanceType"],
                }
            ],
            "Errors": [],
        }

    def spot_price(self, instance_type: str, availability_zone: str) -> float | None:
        return self.price

    def instance_state(self, instance_id: str) -> str | None:
        return None if instance_id in self.invisible else self.states.get(instance_id)

    def terminate(self, instance_ids: list[str]) -> list[str]:
        known = [i for i in instance_ids if i in self.states and i not in self.invisible]
        for instance_id in known:
            self.states[instance_id] = "terminated"
        return known


class FakeObjects:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.heads: dict[tuple[str, str], dict[str, str]] = {}  # storage class and Restore header by object
        self.restored: list[tuple[str, str, int]] = []

    def put_json(self, bucket: str, key: str, document: Any) -> None:
        self.objects[(bucket, key)] = json.dumps(document, default=str).encode()

    def get_bytes(self, bucket: str, key: str) -> bytes:
        return self.objects[(bucket, key)]

    def list_keys(self, bucket: str, prefix: str) -> list[tuple[str, int]]:
        return sorted(
            (key, len(body))
            for (b, key), body in self.objects.items()
            if b == bucket and key.startswith(prefix)
        )

    def list_versions(self, bucket: str, prefix: str) -> list[tuple[str, str, int]]:
        return sorted(
            (key, hashlib.md5(body).hexdigest(), len(body))  # noqa: S324 - an ETag, as S3 makes it
            for (b, key), body in self.objects.items()
            if b == bucket and key.startswith(prefix)
        )

    def copy(self, source: tuple[str, str], destination: tuple[str, str], storage_class: str) -> None:
        self.objects[destination] = self.objects[source]

    def get_tail(self, bucket: str, key: str, max_bytes: int) -> bytes | None:
        body = self.objects.get((bucket, key))
        return None if body is None else body[-max_bytes:]

    def head(self, bucket: str, key: str) -> dict[str, str] | None:
        if (bucket, key) not in self.objects:
            return None
        return self.heads.get((bucket, key), {"storage_class": "STANDARD", "restore": ""})

    def restore(self, bucket: str, key: str, days: int) -> None:
        self.restored.append((bucket, key, days))
        self.heads[(bucket, key)] = {**self.heads[(bucket, key)], "restore": 'ongoing-request="true"'}


class FakeCommands:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.unregistered: set[str] = set()  # instances whose SSM agent is not online yet

    def agent_online(self, instance_id: str) -> bool:
        return instance_id not in self.unregistered

    def run_agent(self, document_name: str, instance_id: str, command_uri: str) -> str:
        self.sent.append((document_name, instance_id, command_uri))
        return f"command-{len(self.sent)}"


class FakeWorkflows:
    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}
        self.failed: list[tuple[str, str, str]] = []
        self.closed_tokens: set[str] = set()
        self.stopped: list[str] = []

    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> str:
        self.started.setdefault(name, payload)
        return f"{state_machine_arn}:{name}"

    def stop(self, execution_arn: str, cause: str) -> bool:
        if execution_arn in self.stopped:
            return False
        self.stopped.append(execution_arn)
        return True

    def fail_task(self, task_token: str, error: str, cause: str) -> bool:
        if task_token in self.closed_tokens:
            return False
        self.closed_tokens.add(task_token)
        self.failed.append((task_token, error, cause))
        return True
