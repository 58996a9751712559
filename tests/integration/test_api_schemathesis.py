"""Property-based: schemathesis drives the API function with requests generated from openapi.json.

The function runs in process behind the same REST-proxy adapter ``spotrun local up`` serves (a WSGI app), on
moto. Every answer must be a documented status with a body matching its schema, and never a 5xx; what the
document forbids is refused and what it allows is accepted. Two kinds of requests: a random sample per operation
(new each run), and schemathesis's coverage cases (every value at and past its bounds, missing parts, other
media types), which find a 5xx that only a long or unusual value triggers.
"""

from __future__ import annotations

import json
import os
import re

import boto3
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.config._checks import NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES
from schemathesis.generation.drivers import CoverageGenerator
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.generation.overrides import Override
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    missing_required_header,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from functions.api import agent_app
from functions.api import app as api
from functions.api.app import EXAMPLE_JOB_ID
from functions.api.openapi import OPENAPI_FILE
from spotrun.aws.adapters import job_store
from spotrun.local.api.gateway import ProxyApp
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import ArchivedObject, JobStatus, ManifestSource, new_job, transition, utc_now
from spotrun.model.layout import log_key
from spotrun.shape import SHAPE
from tests.sigv4 import SigningMiddleware

# Per operation, in each run a new random sample (not derandomized): a 5xx that only a long or unusual value
# triggers is found over runs, while `make test` stays bounded (under a minute on 2 cores). A deeper run by hand:
# SPOTRUN_SCHEMATHESIS_EXAMPLES=300 .venv/bin/python -m pytest tests/integration/test_api_schemathesis.py
EXAMPLES = int(os.environ.get("SPOTRUN_SCHEMATHESIS_EXAMPLES", "15"))
POSITIVE_EXAMPLES = EXAMPLES  # requests the document allows
NEGATIVE_EXAMPLES = EXAMPLES  # requests that break it (bad types, missing fields, out-of-range values, ...)


# The manifest's JSON Schema (spotrun/model/manifest*.py, shown in openapi.json) states every rule of the model that
# JSON Schema can express (patterns, enums, lengths, propertyNames, `not` and `anyOf` combinations). The rules
# below it cannot, so a schema-valid manifest can still break one and be refused with a 422. Such a 422 on a
# manifest body counts as a refusal of data the document does not allow only when every line of it is one of
# these; anything else (another 422 line, a 400, a 415, a 5xx, a 422 on a parameter) refusing schema-valid data
# fails the test.
# POST /plan takes the same body: its manifest-level rules are 422s as for POST /jobs (admission problems are
# not: the plan answers them with 200 and problems).
MANIFEST_BODIES = {("POST", "/jobs"), ("POST", "/schedules"), ("POST", "/plan")}
VALIDATOR_ONLY_RULES = [
    # Two inputs staged to the same or nested directories: a relation between items after normalizing their
    # paths ('a' and './a/b'), which uniqueItems (exact equality) cannot state.
    r"data\.inputs: destinations .+ and .+ overlap",
    # The meaning of a cron expression's fields (minute 0-59, a range that runs backwards, '?' in exactly one
    # of day-of-month and day-of-week, a schedule that never fires): the schema states its shape only.
    r"schedule: (?P<q>['\"]).*(?P=q)(: .+| does not fire within five years)",
    # The time zone exists in the tz database: that database depends on the machine, so no enum.
    r"schedule: .+ is not an IANA time zone",
    # One body schema serves both endpoints: POST /schedules needs a schedule, POST /jobs runs once and
    # refuses one.
    r"schedule: required to create a schedule",
    r"schedule: a manifest with a schedule is not run from here; .+",
    # What this deployment can run: the GPU catalog, a budget that pays one boot at current prices, the
    # archive buckets it is granted.
    r"resources: resources(: no GPU instance type in spotrun's catalog has |\.instance_types: ).+",
    r"budget\.max_usd: .+ cannot pay even .+",
    r"archive\.destination: the bucket .+ is not an archive bucket of this deployment .+",
    # The secrets this deployment's jobs may read (its secret_references option, the job-access role's ceiling),
    # and a name given in both training.env and training.secrets (a relation between two maps' keys).
    r"training\.secrets\.\w+: .+ is not a reference this deployment allows .+",
    r"training: .+: named in both training\.env and training\.secrets; .+",
    # A ${NAME} in the command or a setup command names a variable spotrun sets or a key of training.env, and
    # never one of training.secrets: a relation between the argv's strings and the two maps' keys.
    r"training: (command|setup\[\d+\]): \$\{.*\} names neither a SPOTRUN_ variable .+",
    r"training: (command|setup\[\d+\]): \$\{.*\} names a secret of training\.secrets, .+",
    # training.workdir is a local path only the CLI resolves: every server-side entry point refuses it.
    r"training\.workdir: .+ is a directory on the machine that wrote the manifest, .+",
    # A deadline on-demand cannot meet: arithmetic on the work, the deadline and the submission time.
    r"capacity\.deadline: .+ leaves .+ after submission; training\.expected_hours .+ more: .+",
    # The job's S3 session policy, built from its id and every input and code prefix, must fit STS's 2,048
    # characters: the length of a serialized document over several fields, which no schema keyword states.
    r"data\.inputs / training\.code: job .+'s S3 access takes \d+ characters as a session policy, .+",
    # A multi-node command starts torchrun and leaves the group's options to spotrun: the launcher's name among
    # an argv's strings and an option anywhere in it, which the schema's per-item patterns do not relate to nodes.
    r"\(manifest\): resources\.nodes \d+: training\.command must start torchrun .+",
    r"\(manifest\): training\.command gives .+: spotrun sets the group's torchrun options itself .+",
    # A calendar date the instant's pattern cannot tell from a real one (month 13, February 30).
    r"capacity\.deadline: .+ is not a real time: .+",
    # Data inputs and code must exist in S3 before a job is bought an instance (spotrun.control.staged_sources):
    # the state of the buckets, which no schema can know.
    r"(data\.inputs\[\d+\]\.source|training\.code): (no object .+|.+ cannot be checked: .+)",
]
_VALIDATOR_ONLY = re.compile("|".join(f"(?:{rule})" for rule in VALIDATOR_ONLY_RULES), re.DOTALL)


def refused_for_a_rule_of_the_manifest(response, case) -> bool:
    if response.status_code != 422 or (case.method.upper(), case.path) not in MANIFEST_BODIES:
        return False
    errors = response.json().get("errors") or []
    return bool(errors) and all(_VALIDATOR_ONLY.fullmatch(error) for error in errors)


@schemathesis.check
def valid_data_accepted(ctx, response, case):
    """What the document allows is accepted, or answered 404/409 (unknown id, conflict).

    A ``next_token`` is opaque: only one the listing returned continues it, and any other is the documented 400
    (as AWS answers an unknown NextToken), so a 400 naming ``next_token`` is no rejection of valid data.
    """
    if response.status_code == 400 and (case.query or {}).get("next_token") is not None:
        return None
    if refused_for_a_rule_of_the_manifest(response, case):
        return None
    return positive_data_acceptance(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,  # what the document forbids is refused
    valid_data_accepted,
    missing_required_header,
]


def seed_example_job(settings) -> None:
    """The job the document's path examples name: training, with a log and an archived object."""
    now = utc_now()
    job = new_job(EXAMPLE_JOB_ID, "tiny-regression", ManifestSource(kind="api", key="k"), None, now)
    job = transition(job, JobStatus.ACQUIRING, now)
    attempt = Attempt(
        number=1,
        instance_id="i-0123456789abcdef0",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.4,
        started_at=now,
    )
    uri = f"s3://{settings.archive_bucket}/models/{EXAMPLE_JOB_ID}/model.npy"
    job = transition(job, JobStatus.BOOTING, now).model_copy(
        update={
            "attempts": [attempt],
            "archive": [ArchivedObject(uri=uri, storage_class="GLACIER", size=1, sha256="0" * 64)],
        }
    )
    job_store(settings.jobs_table, settings.region).create(job)
    s3 = boto3.client("s3")
    s3.put_object(Bucket=settings.jobs_bucket, Key=log_key(EXAMPLE_JOB_ID, 1), Body=b"step 1\nstep 2\n")
    s3.put_object(Bucket=settings.archive_bucket, Key=uri.split("/", 3)[3], Body=b"x", StorageClass="GLACIER")


# A negative case may be refused with 413 as well as schemathesis's default statuses: a generated body past the
# API's size limit (a long string breaking a maxLength) is refused for its size before its fields are read, and
# every body route documents that 413.
REFUSALS = SchemathesisConfig.from_dict(
    {
        "checks": {
            "negative_data_rejection": {
                "expected-statuses": [*NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES, "413"]
            }
        }
    }
)


def load_schema():
    # The function is driven behind the local gateway, every request signed with the runtime's user keys
    # (deployed_api): the gateway, as API Gateway, refuses an unsigned one before the function
    # (tests/unit/test_api_gateway_auth.py), so requests that only lack a signature are not generated.
    document = json.loads(OPENAPI_FILE.read_text(encoding="utf-8"))
    document.pop("security")
    return schemathesis.openapi.from_dict(document, config=REFUSALS)


def deployed_api() -> SigningMiddleware:
    """Both API functions behind the REST proxy, each path routed as API Gateway routes it (SHAPE.api_routes),
    each request signed as a user's client signs it."""
    handlers = {"api": api.handler, "agent_api": agent_app.handler}
    subtrees = {path: (handlers[name], f"spotrun-{name}") for path, name in SHAPE.api_routes}
    return SigningMiddleware(ProxyApp(handlers[SHAPE.api_function], "spotrun-api", subtrees=subtrees))


def operations():
    return [result.ok() for result in load_schema().get_all_operations()]


@pytest.mark.timeout(900)
def test_generated_requests_get_no_5xx_and_only_documented_answers(deployment):
    # Given the committed OpenAPI document, the API function behind the REST proxy adapter, and the job
    # that the document's examples name
    seed_example_job(deployment)
    found = operations()
    app = deployed_api()
    # the agent routes included (reports, credentials), POST /code, POST /plan and GET /jobs/{id}/telemetry
    assert len(found) == 16

    for operation in found:
        strategies = [
            *((strategy, 2, False) for strategy in operation.schema.get_strategies_from_examples(operation)),
            (operation.as_strategy(), POSITIVE_EXAMPLES, False),
            (operation.as_strategy(generation_mode=GenerationMode.NEGATIVE), NEGATIVE_EXAMPLES, True),
        ]
        for strategy, count, negative in strategies:
            exercise(strategy, count, app, negative)


def exercise(strategy, count: int, app: SigningMiddleware, negative: bool) -> None:
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case) -> None:
        # When a generated request is sent
        response = case.call(app=app)
        # Then the answer is no server error, and its status, content type and body are documented
        case.validate_response(response, checks=CHECKS)

    try:
        check()
    except Unsatisfiable:
        if not negative:
            raise
        # An operation that takes no input (GET /schedules) has nothing a negative case could break.


@pytest.mark.timeout(900)
def test_boundary_and_unusual_requests_get_no_5xx_and_only_documented_answers(deployment):
    # Given the requests schemathesis's coverage phase derives from each operation: every parameter and field
    # at its bounds (the longest name, the largest limit), just past them, of the wrong type, missing, and
    # bodies of other media types or none at all
    seed_example_job(deployment)
    schema = load_schema()
    app = deployed_api()
    for operation in operations():
        generation = schema.config.generation_for(operation=operation, phase="coverage")
        cases = CoverageGenerator(
            operation=operation,
            generation_modes=list(GenerationMode),
            generation_config=generation,
            auth_storage=None,
            override=Override(),
            feedback=FeedbackSources(),
        )
        for case in cases:
            # When each is sent
            response = case.call(app=app)
            # Then the answer is no server error, and its status, content type and body are documented
            case.validate_response(response, checks=CHECKS)
