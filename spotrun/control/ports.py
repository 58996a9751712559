"""The small ports through which the control plane's logic reaches AWS: every port is here.

The logic modules take these as parameters; :mod:`spotrun.aws.adapters` implements them with boto3, and tests can pass
fakes. Each port carries only what the logic needs, in the logic's words.
"""

from __future__ import annotations

from typing import Any, Protocol

from spotrun.model.agent_protocol.session_policy import JobCredentials
from spotrun.model.job.record import Job, JobStatus


class Compute(Protocol):
    """EC2, as the control plane uses it."""

    def subnet_zones(self, subnet_ids: tuple[str, ...]) -> dict[str, str]:
        """Subnet id -> availability zone."""
        ...

    def create_fleet(self, request: dict[str, Any]) -> dict[str, Any]:
        """Call CreateFleet with ``request``; return the raw response."""
        ...

    def spot_price(self, instance_type: str, availability_zone: str) -> float | None:
        """The current spot price of a pool, USD per hour."""
        ...

    def spot_prices(self, instance_types: list[str]) -> dict[tuple[str, str], float]:
        """Today's spot price of every pool of these types, USD per hour, by (type, zone); in one query."""
        ...

    def instance_state(self, instance_id: str) -> str | None:
        """pending, running, shutting-down, terminated, stopping, stopped; None when EC2 does not know it.

        EC2 is eventually consistent: None just after a launch does not mean the instance does not exist.
        """
        ...

    def private_ips(self, instance_ids: list[str]) -> dict[str, str]:
        """Each known instance's private IPv4 address, in one call (an instance EC2 does not know is left out)."""
        ...

    def terminate(self, instance_ids: list[str]) -> list[str]:
        """Terminate the instances that still exist; return the ids EC2 accepted.

        An id left out (EC2 answered ``InvalidInstanceID.NotFound``) is not proven gone: just after a launch
        the instance may exist and run.
        """
        ...


class Commands(Protocol):
    """SSM Run Command, to reach the agent on an instance."""

    def run_agent(self, document_name: str, instance_id: str, command_uri: str) -> str:
        """Send the agent document to one instance; return the command id."""
        ...

    def agent_online(self, instance_id: str) -> bool:
        """Whether the instance is a managed node whose SSM agent is online (commands can reach it)."""
        ...


class ObjectsUnreadable(Exception):
    """A bucket that cannot be listed: it does not exist, or this function may not list it (the message says)."""


class ObjectMissing(Exception):
    """No object at that key (S3's ``NoSuchKey``): deleted, or never written."""


class Objects(Protocol):
    """S3 objects."""

    def put_json(self, bucket: str, key: str, document: Any) -> None:
        """Write a JSON document."""
        ...

    def get_bytes(self, bucket: str, key: str) -> bytes:
        """Read an object; raises :class:`ObjectMissing` when there is none at ``key``."""
        ...

    def list_keys(self, bucket: str, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object under ``prefix``."""
        ...

    def list_versions(self, bucket: str, prefix: str) -> list[tuple[str, str, int]]:
        """(key, etag, size) of every object under ``prefix``, by key."""
        ...

    def copy(self, source: tuple[str, str], destination: tuple[str, str], storage_class: str) -> None:
        """Server-side copy of (bucket, key) to (bucket, key) in ``storage_class``."""
        ...

    def get_tail(self, bucket: str, key: str, max_bytes: int) -> bytes | None:
        """The last ``max_bytes`` of an object; None when it does not exist."""
        ...

    def first_key(self, bucket: str, prefix: str) -> str | None:
        """The first key (in S3's ascending order) at or under ``prefix``; None when there is none.

        Raises :class:`ObjectsUnreadable` when the bucket does not exist or may not be listed.
        """
        ...

    def head(self, bucket: str, key: str) -> dict[str, str] | None:
        """``{"storage_class": ..., "restore": <Restore header or "">}``; None when the object does not exist."""
        ...

    def restore(self, bucket: str, key: str, days: int) -> None:
        """Ask S3 to restore an archived object for ``days``; a restore already under way is not an error."""
        ...

    def presign_put(
        self, bucket: str, key: str, *, size: int, sha256_b64: str, expires_seconds: int
    ) -> tuple[str, dict[str, str]]:
        """A presigned PUT of exactly ``size`` bytes with this SHA-256: the URL, and the headers it signed."""
        ...


class LogEvents(Protocol):
    """CloudWatch Logs: the live copy of the training logs (the agent writes it; the control plane opens each
    attempt's stream and reads them)."""

    def create_stream(self, group: str, stream: str) -> None:
        """Create the stream ``stream`` in ``group``; one that exists already is left as it is."""
        ...

    def read(
        self, group: str, stream: str, *, token: str | None, limit: int, from_head: bool
    ) -> tuple[list[str], str] | None:
        """Up to ``limit`` messages of a stream and the token of what follows them; None: no such stream.

        After ``token`` when given; else from the stream's head, or its last ``limit`` (``from_head`` False).
        At the stream's end the token answered is the one given.
        """
        ...


class Workflows(Protocol):
    """Step Functions."""

    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> str:
        """Start an execution named ``name``; starting the same name again returns the existing execution."""
        ...

    def fail_task(self, task_token: str, error: str, cause: str) -> bool:
        """Fail the task waiting on ``task_token``; False when that task had already ended."""
        ...

    def send_success(self, task_token: str, output: str) -> bool:
        """Complete the task waiting on ``task_token`` with the JSON ``output``; False when it had ended."""
        ...

    def send_heartbeat(self, task_token: str) -> bool:
        """Say the task waiting on ``task_token`` is alive; False when it had ended."""
        ...

    def stop(self, execution_arn: str, cause: str) -> bool:
        """Stop a running execution; False when it had already ended (or never existed)."""
        ...


class Events(Protocol):
    """EventBridge: the deployment's own bus."""

    def publish(self, detail_type: str, detail: dict[str, Any]) -> None:
        """Put one event with source ``spotrun`` on the bus."""
        ...


class Schedules(Protocol):
    """EventBridge Scheduler: the deployment's schedule group, every schedule invoking one target."""

    def create(self, name: str, expression: str, timezone: str, payload: dict[str, Any]) -> bool:
        """Create a schedule sending ``payload``; False (nothing changed) when the name exists already."""
        ...

    def list(self) -> list[dict[str, Any]]:
        """``{"name", "expression", "timezone", "state"}`` of every schedule of the group."""
        ...

    def delete(self, name: str) -> bool:
        """Delete a schedule; False when there was none of that name."""
        ...


class JobStore(Protocol):
    """What the control plane needs from persistence."""

    def create(self, job: Job) -> bool:
        """Store a new job; False (and nothing written) when the id exists already."""
        ...

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""
        ...

    def save(self, job: Job) -> Job:
        """Write ``job`` if the stored version is still ``job.version``; return it with the version bumped.

        Raises ConcurrentUpdate otherwise.
        """
        ...

    def link_instance(self, instance_id: str, job_id: str) -> None:
        """Remember that ``instance_id`` works for ``job_id``."""
        ...

    def job_for_instance(self, instance_id: str) -> str | None:
        """The job an instance works for, or None."""
        ...

    def list_jobs(
        self,
        status: JobStatus | None = None,
        name: str | None = None,
        limit: int = 20,
        next_token: str | None = None,
    ) -> tuple[list[Job], str | None]:
        """Jobs, newest first, filtered by status and name; the token continues the listing (None: the end).

        Raises InvalidPageToken for a token this listing did not make.
        """
        ...


class JobAccess(Protocol):
    """STS, for the job-access role: S3 credentials narrowed to one job by a session policy."""

    def credentials(self, session_name: str, session_policy: str) -> JobCredentials:
        """Assume the job-access role as ``session_name`` with the inline ``session_policy`` (JSON)."""
        ...


class DeploymentSettings(Protocol):
    """What the use cases read of the deployment's settings (:class:`spotrun.aws.settings.Settings` holds them)."""

    @property
    def region(self) -> str: ...
    @property
    def jobs_bucket(self) -> str: ...
    @property
    def agent_document_name(self) -> str: ...
    @property
    def agent_report_url(self) -> str: ...
    @property
    def launch_template_name(self) -> str: ...
    @property
    def efa_launch_template_name(self) -> str: ...
    @property
    def subnet_ids(self) -> tuple[str, ...]: ...
    @property
    def placement_group_names(self) -> tuple[str, ...]: ...
    @property
    def overlap_replacement(self) -> bool: ...
    @property
    def time_scale(self) -> float: ...
