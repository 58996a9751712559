"""Runtime settings of the control plane, read from the environment at call time (never at import)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import ConfigDict, Field, model_validator

from spotrun.model.base import DeferredModel

ENV_PREFIX = "SPOTRUN_"
# Fields held in the environment as comma-separated lists.
_LIST_FIELDS = frozenset({"subnet_ids", "placement_group_names", "archive_buckets", "reference_patterns"})
# Declared fields whose empty value means something: no extra archive buckets, no bus to publish on.
_MAY_BE_EMPTY = frozenset({"archive_buckets", "event_bus_name", "reference_patterns"})


class MissingSettings(RuntimeError):
    """A function's environment lacks settings it declares (a deployment that does not match the code)."""


class Settings(DeferredModel):
    """What a Lambda function (or the CLI) needs to know about its deployment.

    Each field is read from ``SPOTRUN_<FIELD NAME IN UPPER CASE>``. The deployment's shape
    (:mod:`spotrun.shape`) says which function reads which field.
    """

    model_config = ConfigDict(frozen=True)

    region: str = Field(default="us-east-1")
    jobs_table: str = ""
    idempotency_table: str = ""
    jobs_bucket: str = ""
    archive_bucket: str = ""
    # Further buckets a manifest's archive.destination may name (the deployer's CDK option archive_buckets).
    archive_buckets: tuple[str, ...] = ()
    # ARN patterns of the secrets a manifest's training.secrets may name (the deployer's CDK option
    # secret_references): the job-access role's ceiling, checked at admission. Named without "secret": the
    # functions' environments hold no secret, and a test keeps such names out of them.
    reference_patterns: tuple[str, ...] = ()
    state_machine_arn: str = ""
    # The EventBridge bus on which job status changes are published; empty: not published.
    event_bus_name: str = ""
    # Scheduled retraining: the Scheduler group, the role it assumes and the function its schedules invoke.
    schedule_group: str = ""
    scheduler_role_arn: str = ""
    scheduled_run_arn: str = ""
    agent_document_name: str = ""
    # Where the agent reports its steps (the API's agent route); written into each command by agent_step.
    agent_report_url: str = ""
    # The instances' role: only its sessions, named after their instance, may report through that route.
    instance_role_name: str = ""
    # The role the API function assumes for an instance's S3 credentials, narrowed to its job (job_credentials).
    job_access_role_arn: str = ""
    launch_template_name: str = ""
    # The template of multi-node groups with an EFA: the same instances, with an EFA as their network interface.
    efa_launch_template_name: str = ""
    subnet_ids: tuple[str, ...] = ()
    # One cluster placement group per subnet, in the order of subnet_ids (a cluster group lives in one zone).
    placement_group_names: tuple[str, ...] = ()
    # Launch the replacement on the interruption warning, so it boots while the checkpoint uploads.
    overlap_replacement: bool = True
    # A multi-node job that loses a node keeps its healthy nodes for the next attempt; false relaunches the whole
    # group, as the peers do (the recovery bench's baseline).
    keep_healthy_nodes: bool = True
    # 1.0 in AWS. The emulator shrinks every wait, heartbeat and boot delay by this one factor.
    time_scale: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _one_placement_group_per_subnet(self) -> Settings:
        # Read by a function that declares both; one that declares only one of them leaves the other empty.
        if (
            self.subnet_ids
            and self.placement_group_names
            and (len(self.subnet_ids) != len(self.placement_group_names))
        ):
            raise ValueError(
                f"{len(self.placement_group_names)} placement groups for {len(self.subnet_ids)} subnets: the "
                "deployment makes one per subnet, in the order of subnet_ids; redeploy the stack"
            )
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build the settings from ``SPOTRUN_*`` variables.

        Parameters
        ----------
        environ
            The environment to read; ``os.environ`` when omitted.

        Returns
        -------
        Settings
            The validated settings.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            is_list = name in _LIST_FIELDS
            values[name] = tuple(part for part in raw.split(",") if part) if is_list else raw
        aws_region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if "region" not in values and aws_region:
            values["region"] = aws_region
        return cls.model_validate(values)

    @classmethod
    def for_function(
        cls, function: str, names: tuple[str, ...], environ: Mapping[str, str] | None = None
    ) -> Settings:
        """The settings one function declares, read from its environment and checked before any use.

        Only ``names`` are read (and the region): the others keep their defaults, as in the deployed function,
        whose environment holds the declared variables only. A name whose variable is unset, or empty when
        empty means nothing, fails here, naming every such variable.

        Parameters
        ----------
        function
            The function's name, for the message.
        names
            The fields it reads (:attr:`spotrun.shape.FunctionSpec.settings`).
        environ
            The environment to read; ``os.environ`` when omitted.

        Returns
        -------
        Settings
            The validated settings.

        Raises
        ------
        MissingSettings
            When a declared variable is unset or empty.
        """
        env = os.environ if environ is None else environ
        variables = {name: ENV_PREFIX + name.upper() for name in names}
        missing = [
            variable
            for name, variable in variables.items()
            if env.get(variable) is None or (env[variable] == "" and name not in _MAY_BE_EMPTY)
        ]
        if missing:
            raise MissingSettings(
                f"the {function} function's environment lacks {', '.join(missing)}: the deployment sets every "
                "setting spotrun.shape declares for it; redeploy the stack"
            )
        wanted = {variable: env[variable] for variable in variables.values()}
        for name in ("AWS_REGION", "AWS_DEFAULT_REGION", ENV_PREFIX + "REGION"):
            if name in env:
                wanted[name] = env[name]
        return cls.from_env(wanted)

    @property
    def allowed_archive_buckets(self) -> tuple[str, ...]:
        """Every bucket a model may be archived to: the deployment's own, then the deployer's extra ones."""
        return tuple(dict.fromkeys(name for name in (self.archive_bucket, *self.archive_buckets) if name))

    def to_env(self) -> dict[str, str]:
        """Return the ``SPOTRUN_*`` variables that reproduce these settings."""
        env = {}
        for name, value in self.model_dump().items():
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            env[ENV_PREFIX + name.upper()] = text
        return env
