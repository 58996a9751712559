"""What each Lambda handler loads at import, its cold start: only what it uses (docs/development/cold-start.md).

Each handler is imported in a fresh interpreter of its own, as Lambda does, with the environment a deployed
function has at init: ``LAMBDA_TASK_ROOT`` set makes Powertools' Tracer and the X-Ray SDK act as on Lambda with
active tracing (infra/constructs/control_plane/functions.py sets ``Tracing.ACTIVE``), so tracing is on here as it
is there.
This venv holds requests, sqlite3's patcher targets, rich, typer and moto, so a handler that reached for any of
them would show it. No time is measured: ``make bench`` does that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from infra.lambda_env import init_environment
from spotrun.shape import REPO_ROOT, SHAPE

# One interpreter loads boto3 and pydantic, which every handler uses and none of the modules checked below comes
# from, then forks one child per handler: each child imports its handler alone, so what a child holds is what
# that handler's import loaded on top of the two, at a fraction of the cost of a fresh interpreter each.
_PROBE = """
import importlib, json, os, sys
import boto3, pydantic
# Each API function's module -> the name its last import binds
API_WINDOWS = {"functions.api.app": "JobManifest", "functions.api.agent_app": "logger"}
children = []
for module in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        import gc
        # The collections that ran while functions.runtime's imports did, from its first (the AWS adapters) to its
        # singletons: the collector is meant to be paused there (functions.import_window)
        in_runtime_imports, in_api_imports = [], []
        def watch(phase, info):
            runtime = sys.modules.get("functions.runtime")
            if (
                phase == "start"
                and runtime is not None
                and "spotrun.aws.adapters" in sys.modules
                and not hasattr(runtime, "metrics")
            ):
                in_runtime_imports.append(info["generation"])
            # An API function's window is its own module's imports, from the resolver's (most of its cold start)
            # to its last
            for name, last in API_WINDOWS.items():
                api = sys.modules.get(name)
                if (
                    phase == "start"
                    and api is not None
                    and "aws_lambda_powertools.event_handler" in sys.modules
                    and not hasattr(api, last)
                ):
                    in_api_imports.append(info["generation"])
        gc.callbacks.append(watch)
        importlib.import_module(module)
        gc.callbacks.remove(watch)
        import botocore.client
        # The X-Ray SDK wraps the call with wrapt (aws_xray_sdk.ext.botocore.patch); botocore's own decorator
        # leaves a functools wrapper, which is not one.
        import wrapt

        traced = isinstance(vars(botocore.client.BaseClient)["_make_api_call"], wrapt.FunctionWrapper)
        # The project's pydantic models whose validator was built by the import (none should be: defer_build)
        def subclasses(cls):
            for sub in cls.__subclasses__():
                yield sub
                yield from subclasses(sub)
        built = sorted(
            f"{model.__module__}.{model.__qualname__}"
            for model in set(subclasses(pydantic.BaseModel))
            if model.__module__.startswith(("spotrun.", "functions."))
            and model.__pydantic_complete__
            # A generic base with its type variables still open (DeferredRootModel) is never validated itself
            and not model.__pydantic_generic_metadata__["parameters"]
        )
        os.write(
            write,
            json.dumps(
                {
                    "modules": sorted(sys.modules),
                    "botocore_traced": traced,
                    "built": built,
                    "collections": in_runtime_imports,
                    "api_collections": in_api_imports,
                }
            ).encode(),
        )
        os._exit(0)
    os.close(write)
    children.append((module, pid, read))
results = {}
for module, pid, read in children:
    with os.fdopen(read, "rb") as pipe:
        out = pipe.read()
    _, status = os.waitpid(pid, 0)
    results[module] = json.loads(out) if status == 0 and out else None
print(json.dumps(results))
"""

# The handler module of each function, by function name.
HANDLERS = {spec.name: spec.handler.rpartition(".")[0] for spec in SHAPE.functions}
# The functions whose use cases read manifests (YAML) and submit jobs.
SUBMITTING = {"submit", "api", "scheduled_run"}
# Those that load the submission at import: the users' API loads it at the first request of a route that submits
# or plans (POST /jobs, POST /plan, POST /schedules).
SUBMITTING_AT_IMPORT = SUBMITTING - {"api"}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Function name -> what importing its handler loaded, each in an interpreter of its own."""
    env = init_environment(REPO_ROOT, tmp_path_factory.mktemp("lambda-tmp"), os.environ.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *HANDLERS.values()],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    by_module = json.loads(done.stdout.strip().splitlines()[-1])
    failed = [module for module, result in by_module.items() if result is None]
    assert failed == [], done.stderr
    return {
        name: {
            "modules": set(by_module[module]["modules"]),
            "botocore_traced": by_module[module]["botocore_traced"],
            "built": by_module[module]["built"],
            "collections": by_module[module]["collections"],
            "api_collections": by_module[module]["api_collections"],
        }
        for name, module in HANDLERS.items()
    }


def _loading(loaded: dict[str, dict], *modules: str) -> set[str]:
    """The functions whose handler import loaded any of ``modules`` (a package or one of its submodules)."""
    return {
        name
        for name, result in loaded.items()
        if any(m == wanted or m.startswith(wanted + ".") for m in result["modules"] for wanted in modules)
    }


def test_tracing_stays_on_and_patches_only_botocore(loaded):
    # Given every handler imported as on Lambda with active tracing
    # Then each traces its AWS calls (botocore's API call is wrapped by the X-Ray SDK)
    assert {name for name, result in loaded.items() if not result["botocore_traced"]} == set()
    # And none imported the other libraries X-Ray can patch, which Tracer's default patch_all imports to patch
    assert _loading(loaded, "requests", "sqlite3", "httpx") == set()


def test_no_handler_loads_the_openapi_document_models(loaded):
    # Given every handler imported, the API's included
    # Then none built Powertools' OpenAPI document models: only the document generator needs them
    assert _loading(loaded, "aws_lambda_powertools.event_handler.openapi.models") == set()


def test_only_the_api_loads_the_rest_resolver_and_none_idempotency(loaded):
    # Given every handler imported
    # Then the resolver is the two API functions' alone
    assert _loading(loaded, "aws_lambda_powertools.event_handler") == {"api", "agent_api"}
    # And Powertools' idempotency is loaded by none: POST /jobs, its only user, imports it at its first request
    assert _loading(loaded, "aws_lambda_powertools.utilities.idempotency") == set()


def test_each_api_function_loads_only_its_own_routes(loaded):
    # Given every handler imported
    # Then the agents' routes and their use cases are the agent function's alone, and the users' routes the API's
    assert _loading(loaded, "functions.api.agent", "spotrun.control.agent_reports") == {"agent_api"}
    assert _loading(loaded, "spotrun.control.job_credentials", "spotrun.control.capacity.deadline_moves") <= {
        "agent_api",
        "deadline_return",
    }
    assert _loading(loaded, "functions.api.app", "functions.api.schedules", "functions.api.plan") == {"api"}


def test_only_the_functions_that_submit_load_the_submission_and_the_manifest_reader(loaded):
    # Given every handler imported
    # Then the submission is loaded by the functions that submit jobs on every invocation only (the users' API
    # loads it with the route that submits or plans)
    assert _loading(loaded, "spotrun.control.submission") == SUBMITTING_AT_IMPORT
    # And the manifest reader's module by those, and by the agents' API, whose 422s it words as the users' API's
    assert _loading(loaded, "spotrun.model.manifest.parse") == SUBMITTING | {"agent_api"}
    # And YAML by none: it is loaded by the first manifest text read (the API reads JSON bodies only)
    assert _loading(loaded, "yaml", "spotrun.model.manifest.yaml_text") == set()
    # And the schedules' use cases by the function that fires schedules only (finalize reads run records only; the
    # users' API loads them with its schedule routes)
    assert _loading(loaded, "spotrun.control.schedules.firing") == {"scheduled_run"}


def test_the_users_api_loads_what_one_route_alone_calls_at_that_routes_first_request(loaded):
    # Given the users' API imported
    # Then it loaded none of what a single route calls: the submission and idempotency (POST /jobs), the planning
    # (POST /plan), the schedules' use cases (the schedule routes), the deadline policy the first three check a
    # manifest with, the release (DELETE /jobs/{id}) and the checkpoints' reader (a running job's GET /jobs/{id}).
    # Each is imported inside its route or use case: importing one at module level again fails here.
    one_route = (
        "aws_lambda_powertools.utilities.idempotency",
        "spotrun.control.submission",
        "spotrun.control.views.plan",
        "spotrun.control.schedules.firing",
        "spotrun.model.deadline.stored_job",
        "spotrun.control.capacity.release",
        "spotrun.model.agent_protocol.checkpoints",
    )
    assert {module for module in one_route if _loading({"api": loaded["api"]}, module)} == set()


def test_no_handler_loads_what_only_a_refusal_or_a_person_needs(loaded):
    # Given every handler imported
    # Then none loaded the "did you mean" matcher (a refused manifest imports it), the CLI or the emulator
    assert _loading(loaded, "difflib", "rich", "typer", "moto", "spotrun.local", "spotrun.cli") == set()


def test_no_handler_builds_a_model_at_import(loaded):
    # Given every handler imported
    # Then none of the project's pydantic models was built (each is a DeferredModel, built on its first use):
    # built at import, the job record's models and the manifest they embed were most of every cold start
    assert {name: result["built"] for name, result in loaded.items() if result["built"]} == {}


def test_only_the_handlers_of_powertools_event_models_load_its_parser(loaded):
    # Given every handler imported
    # Then Powertools' parser package (which imports pydantic.networks and importlib.metadata) is loaded only by
    # the three whose event models come from it (EventBridge's envelope): the others parse through
    # functions.runtime.function_handler
    assert _loading(loaded, "aws_lambda_powertools.utilities.parser") == {
        "submit",
        "ec2_events",
        "deadline_return",
    }


def test_only_the_functions_that_talk_to_the_agent_load_its_command_models(loaded):
    # Given every handler imported
    # Then the agent's command models are loaded by the functions that send, read or answer agent commands only:
    # the deployment's shape names the agent document without building it, and finalize parses a caught error
    # (with those models) only when a job failed; deadline_return sends the notice of a move (with them) only when
    # EC2 had spot for the job
    assert _loading(loaded, "spotrun.model.agent_protocol.command") == {
        "agent_step",
        "archive",
        "interrupted",
        "ec2_events",
        "agent_api",  # the reports (the users' API no longer loads them)
    }


def test_the_agents_api_loads_the_deadline_policy_with_a_deadline_jobs_first_heartbeat(loaded):
    # Given the agents' API imported
    # Then it loaded neither the deadline policy nor what moves a job (the notice's sender, the standby's launch):
    # a training heartbeat decides again for a deadline job only, and imports them then
    moves = (
        "spotrun.model.deadline.stored_job",
        "spotrun.control.capacity.ec2_events",
        "spotrun.control.capacity.interruptions",
        "spotrun.control.capacity.standby",
    )
    assert {module for module in moves if _loading({"agent_api": loaded["agent_api"]}, module)} == set()


def test_only_the_functions_that_launch_or_decide_load_the_fleet_request_and_the_deadline_policy(loaded):
    # Given every handler imported
    # Then the fleet request is loaded by the functions that launch instances (an acquisition, a warning's or a
    # return's standby), and the deadline policy by those and the ones that check a
    # manifest with it: the job record names neither (its capacity wait takes a launch's errors from its caller,
    # its lifecycle choice takes the policy's decision), so the other functions, both APIs among them, load
    # neither at import
    launching = {"acquire", "deadline_return", "ec2_events"}
    assert _loading(loaded, "spotrun.model.capacity.fleet_request") == launching
    assert _loading(loaded, "spotrun.model.deadline.state") == launching | {"submit", "scheduled_run"}


def test_no_collection_runs_while_the_runtime_imports(loaded):
    # Given every handler imported, the cyclic garbage collector on as in Lambda
    # Then no collection ran while functions.runtime's imports did (boto3, the job record, the X-Ray SDK): each
    # would scan long-lived objects and free nothing; the window ends by freezing them
    assert {name: result["collections"] for name, result in loaded.items() if result["collections"]} == {}


def test_no_young_collection_runs_while_the_api_functions_import(loaded):
    # Given the two API functions' handlers imported, the collector on
    # Then no young-generation collection ran while their modules' imports did (Powertools' resolver with every
    # event data class comes before functions.runtime's own window opens)
    assert {name: loaded[name]["api_collections"] for name in ("api", "agent_api")} == {
        "api": [],
        "agent_api": [],
    }
