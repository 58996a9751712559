"""Handlers served by the embedded runtime in its integration tests (imported by dotted path)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from spotrun.model.errors import CapacityUnavailable

RECEIVED: list[dict[str, Any]] = []
RECEIVED_EVENT = threading.Event()
TOKENS: dict[str, str] = {}
TOKEN_PARKED = threading.Event()


class Echo(BaseModel):
    """What :func:`echo` returns: a pydantic model, serialised by the runtime."""

    received: dict[str, Any]
    function_name: str
    remaining_ms: int


def echo(event: dict[str, Any], context: Any) -> Echo:
    """Return the event and what the context says."""
    return Echo(
        received=event,
        function_name=context.function_name,
        remaining_ms=context.get_remaining_time_in_millis(),
    )


def no_capacity(event: dict[str, Any], context: Any) -> None:
    """Fail with a named error the state machine routes on."""
    raise CapacityUnavailable(f"no pool for {event.get('key')}")


def park(event: dict[str, Any], context: Any) -> None:
    """Keep the task token so that the test can answer the workflow, as the agent does."""
    TOKENS[event["key"]] = event["token"]
    TOKEN_PARKED.set()


def record(event: dict[str, Any], context: Any) -> dict[str, str]:
    """Remember every event received."""
    RECEIVED.append(event)
    RECEIVED_EVENT.set()
    return {"recorded": event.get("id", "")}


# --------------------------------------------------------------------------- shapes and scripts for the tests

STAND_IN_AGENT = """
import json, os, subprocess, sys, time

uri = sys.argv[-1]
# The URI is a command key (jobs/<name>-<12 hex>/agent/...): the record is named after the job's <name>.
name = uri.split("/")[-3].rsplit("-", 1)[0]
record = {
    "argv": sys.argv,
    "pid": os.getpid(),
    "env": {k: v for k, v in os.environ.items() if k.startswith(("SPOTRUN_", "AWS_", "PYTHON", "PATH", "SSM_"))},
}
if "sleep" in uri:
    # A grandchild in a session of its own: termination must find it all the same.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    record["grandchild"] = child.pid
path = os.path.join(os.environ["SPOTRUN_NVME_ROOT"], name + ".json")
with open(path + ".tmp", "w") as out:
    json.dump(record, out)
os.replace(path + ".tmp", path)
if "sleep" in uri:
    time.sleep(120)
"""

PASS_ASL = '{"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": true}}}'


def command_uri(bucket: str, name: str) -> str:
    """A URI the agent document accepts, for a job named ``name`` (the stand-in agent's record is ``name``)."""
    from spotrun.model.layout import agent_command_key

    return f"s3://{bucket}/{agent_command_key(f'{name}-0123456789ab', 1, 'train')}"


def pass_runtime(workdir: Path, pools: Sequence[Any], time_scale: float) -> Any:
    """A LocalRuntime (to start) on ``pools`` with :func:`minimal_shape` and a workflow that only passes."""
    from spotrun.local.runtime import LocalRuntime

    asl = workdir / "pass.asl.json"
    asl.write_text(PASS_ASL)
    return LocalRuntime(
        workdir, time_scale=time_scale, pools=list(pools), shape=minimal_shape(), state_machine_file=asl
    )


def minimal_shape() -> Any:
    """A shape with the real buckets and tables but no functions: for tests of EC2, SSM and instances."""
    from spotrun.shape import SHAPE, DeploymentShape

    return DeploymentShape(functions=(), tables=SHAPE.tables, buckets=SHAPE.buckets, rules=())
