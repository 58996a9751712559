"""In-memory fakes of spotrun.control.ports, for unit tests of the control plane's logic."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from typing import Any

from spotrun.aws.job_store import decode_page_token, encode_page_token
from spotrun.control.ports import ObjectMissing
from spotrun.model.errors import ConcurrentUpdate
from spotrun.model.job.record import Job, JobStatus


class FakeCompute:
    """EC2 with unlimited capacity: every fleet gets its first override."""

    def __init__(self, zones: dict[str, str] | None = None, price: float | None = 0.2):
        self.zones = zones or {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}
        self.price = price
        self.states: dict[str, str] = {}
        self.fleet_requests: list[dict[str, Any]] = []
        self.unavailable = False
        self.spot_unavailable = False  # spot has no capacity, on-demand has
        self.error_code = "InsufficientInstanceCapacity"  # what every pool answers while unavailable
        # Ids EC2 answers NotFound for, in DescribeInstances and TerminateInstances (eventual consistency):
        # the instance exists and runs, terminate does nothing.
        self.invisible: set[str] = set()
        self.full_subnets: set[str] = set()  # subnets whose pools have no capacity (their zone is full)
        self._ids = (f"i-{n:017x}" for n in itertools.count(1))

    def subnet_zones(self, subnet_ids: tuple[str, ...]) -> dict[str, str]:
        return {subnet: zone for subnet, zone in self.zones.items() if subnet in subnet_ids}

    def create_fleet(self, request: dict[str, Any]) -> dict[str, Any]:
        self.fleet_requests.append(request)
        config = request["LaunchTemplateConfigs"][0]
        lifecycle = request["TargetCapacitySpecification"]["DefaultTargetCapacityType"]
        if self.unavailable or (self.spot_unavailable and lifecycle == "spot"):
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
        open_overrides = [o for o in config["Overrides"] if o["SubnetId"] not in self.full_subnets]
        if not open_overrides:
            errors = [
                {
                    "LaunchTemplateAndOverrides": {"Overrides": override},
                    "Lifecycle": lifecycle,
                    "ErrorCode": "InsufficientInstanceCapacity",
                    "ErrorMessage": "InsufficientInstanceCapacity (fake: zone full)",
                }
                for override in config["Overrides"]
            ]
            return {"Instances": [], "Errors": errors}
        override = open_overrides[0]
        count = request["TargetCapacitySpecification"]["TotalTargetCapacity"]
        instance_ids = [next(self._ids) for _ in range(count)]
        for instance_id in instance_ids:
            self.states[instance_id] = "pending"
        return {
            "Instances": [
                {
                    "LaunchTemplateAndOverrides": {"Overrides": override},
                    "Lifecycle": lifecycle,
                    "InstanceIds": instance_ids,
                    "InstanceType": override["InstanceType"],
                }
            ],
            "Errors": [],
        }

    def spot_price(self, instance_type: str, availability_zone: str) -> float | None:
        return self.price

    def private_ips(self, instance_ids: list[str]) -> dict[str, str]:
        # Addresses that sort unlike launch order (10.0.0.<100 - n>): node order is the addresses' order.
        return {
            instance_id: f"10.0.0.{100 - int(instance_id[2:], 16)}"
            for instance_id in instance_ids
            if instance_id in self.states and instance_id not in self.invisible
        }

    def spot_prices(self, instance_types: list[str]) -> dict[tuple[str, str], float]:
        zones = set(self.zones.values())
        return {} if self.price is None else {(t, z): self.price for t in instance_types for z in zones}

    def instance_state(self, instance_id: str) -> str | None:
        return None if instance_id in self.invisible else self.states.get(instance_id)

    def terminate(self, instance_ids: list[str]) -> list[str]:
        known = [i for i in instance_ids if i in self.states and i not in self.invisible]
        for instance_id in known:
            self.states[instance_id] = "terminated"
        return known


class FakeEvents:
    """The deployment's bus: every event published, as (detail-type, detail)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, Any]]] = []

    def publish(self, detail_type: str, detail: dict[str, Any]) -> None:
        self.published.append((detail_type, detail))


class FakeObjects:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.heads: dict[tuple[str, str], dict[str, str]] = {}  # storage class and Restore header by object
        self.restored: list[tuple[str, str, int]] = []
        self.presigned: list[tuple[str, str, int, str]] = []  # (bucket, key, size, sha256 base64)

    def put_json(self, bucket: str, key: str, document: Any) -> None:
        self.objects[(bucket, key)] = json.dumps(document, default=str).encode()

    def get_bytes(self, bucket: str, key: str) -> bytes:
        if (bucket, key) not in self.objects:
            raise ObjectMissing(f"s3://{bucket}/{key} does not exist")
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

    def first_key(self, bucket: str, prefix: str) -> str | None:
        return next((key for key, _size in self.list_keys(bucket, prefix)), None)

    def head(self, bucket: str, key: str) -> dict[str, str] | None:
        if (bucket, key) not in self.objects:
            return None
        return self.heads.get((bucket, key), {"storage_class": "STANDARD", "restore": ""})

    def restore(self, bucket: str, key: str, days: int) -> None:
        self.restored.append((bucket, key, days))
        self.heads[(bucket, key)] = {**self.heads[(bucket, key)], "restore": 'ongoing-request="true"'}

    def presign_put(
        self, bucket: str, key: str, *, size: int, sha256_b64: str, expires_seconds: int
    ) -> tuple[str, dict[str, str]]:
        self.presigned.append((bucket, key, size, sha256_b64))
        url = f"https://{bucket}.s3.example/{key}?X-Amz-Expires={expires_seconds}"
        return url, {
            "content-length": str(size),
            "content-type": "application/gzip",
            "x-amz-checksum-sha256": sha256_b64,
        }


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
        self.succeeded: list[tuple[str, str]] = []
        self.heartbeats: list[str] = []
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

    def send_success(self, task_token: str, output: str) -> bool:
        if task_token in self.closed_tokens:
            return False
        self.closed_tokens.add(task_token)
        self.succeeded.append((task_token, output))
        return True

    def send_heartbeat(self, task_token: str) -> bool:
        if task_token in self.closed_tokens:
            return False
        self.heartbeats.append(task_token)
        return True


class InMemoryJobStore:
    """:class:`JobStore` in a dict, with the conditional semantics of ``DynamoJobStore``."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._instances: dict[str, str] = {}
        self._lock = threading.Lock()

    def create(self, job: Job) -> bool:
        with self._lock:
            if job.job_id in self._jobs:
                return False
            self._jobs[job.job_id] = job
            return True

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def save(self, job: Job) -> Job:
        with self._lock:
            stored = self._jobs.get(job.job_id)
            if stored is None or stored.version != job.version:
                raise ConcurrentUpdate(f"job {job.job_id} changed since version {job.version}")
            written = job.model_copy(update={"version": job.version + 1})
            self._jobs[job.job_id] = written
            return written

    def link_instance(self, instance_id: str, job_id: str) -> None:
        self._instances[instance_id] = job_id

    def job_for_instance(self, instance_id: str) -> str | None:
        return self._instances.get(instance_id)

    def list_jobs(
        self,
        status: JobStatus | None = None,
        name: str | None = None,
        limit: int = 20,
        next_token: str | None = None,
    ) -> tuple[list[Job], str | None]:
        ordered = sorted(self._jobs.values(), key=lambda job: (job.created_at, job.job_id), reverse=True)
        matching = [
            job
            for job in ordered
            if (status is None or job.status == status) and (name is None or job.name == name)
        ]
        offset = 0
        if next_token is not None:
            after = decode_page_token(next_token, frozenset({"job_id"}))["job_id"]
            offset = next((i + 1 for i, job in enumerate(matching) if job.job_id == after), len(matching))
        page = matching[offset : offset + limit]
        more = offset + limit < len(matching)
        return page, encode_page_token({"job_id": page[-1].job_id}) if more and page else None
