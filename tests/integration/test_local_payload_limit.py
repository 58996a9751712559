"""Step Functions' 256 KiB payload quota in the emulator, and a training result of 5,000 output files within it."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.agent.steps.final_outputs import write_output_list  # noqa: E402
from spotrun.aws.objects import S3Objects  # noqa: E402
from spotrun.control.archive import read_output_list  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.agent_protocol.command import OutputObject, TrainResult  # noqa: E402
from spotrun.shape import SHAPE, DeploymentShape, FunctionSpec  # noqa: E402

FILES = 5_000
SHAPE_UNDER_TEST = DeploymentShape(
    functions=(FunctionSpec("park", "fixtures_handlers.park", "Keeps the task token."),),
    tables=SHAPE.tables,
    buckets=SHAPE.buckets,
    rules=(),
    state_machine_functions={"ParkArn": "park"},
)
# The Train state of the job workflow, reduced to its callback: the agent answers with SendTaskSuccess.
ASL = {
    "StartAt": "Train",
    "States": {
        "Train": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {
                "FunctionName": "${ParkArn}",
                "Payload": {"token.$": "$$.Task.Token", "key.$": "$.key"},
            },
            "ResultPath": "$.trained",
            "End": True,
        }
    },
}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("payload")
    asl = workdir / "train.asl.json"
    asl.write_text(json.dumps(ASL))
    with LocalRuntime(workdir, time_scale=0.01, shape=SHAPE_UNDER_TEST, state_machine_file=asl) as started:
        yield started


def _outputs(job_id: str) -> list[OutputObject]:
    """What the agent uploads for a model directory of FILES shards."""
    return [
        OutputObject(
            key=f"jobs/{job_id}/output/model/shard-{index:05d}.safetensors",
            size=4096 + index,
            sha256=hashlib.sha256(str(index).encode()).hexdigest(),
        )
        for index in range(FILES)
    ]


def _parked_execution(runtime: LocalRuntime, name: str) -> tuple[str, str]:
    handlers.TOKEN_PARKED.clear()
    arn = runtime.client("stepfunctions").start_execution(
        stateMachineArn=runtime.settings.state_machine_arn, name=name, input=json.dumps({"key": name})
    )["executionArn"]
    assert handlers.TOKEN_PARKED.wait(10)
    return arn, handlers.TOKENS[name]


def _finished(runtime: LocalRuntime, arn: str, timeout: float = 10.0) -> dict[str, Any]:
    sfn = runtime.client("stepfunctions")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = sfn.describe_execution(executionArn=arn)
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.05)
    raise AssertionError("the execution did not finish")


def test_a_result_listing_5000_output_files_is_refused_as_aws_refuses_it(runtime: LocalRuntime) -> None:
    # Given a Train task waiting for the agent, and the result the old design sent: every output file listed
    arn, token = _parked_execution(runtime, "old-design")
    outputs = _outputs("old-design")
    old_result = {
        "seconds": 1.0,
        "outputs": [item.model_dump() for item in outputs],
        "model_key": "jobs/old-design/output/model/",
        "model_sha256": "0" * 64,
        "log_key": "jobs/old-design/logs/attempt-001.log",
    }
    assert len(json.dumps(old_result).encode()) > 256 * 1024
    # When the agent reports it
    # Then Step Functions refuses the output (over 256 KiB), and the task is still waiting
    with pytest.raises(ClientError) as refused:
        runtime.client("stepfunctions").send_task_success(taskToken=token, output=json.dumps(old_result))
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "262144" in refused.value.response["Error"]["Message"]
    assert runtime.client("stepfunctions").describe_execution(executionArn=arn)["status"] == "RUNNING"
    runtime.client("stepfunctions").stop_execution(executionArn=arn)


def test_a_result_for_5000_output_files_passes_with_the_list_kept_in_s3(runtime: LocalRuntime) -> None:
    # Given a Train task waiting for the agent, and a model directory of 5,000 uploaded files
    arn, token = _parked_execution(runtime, "new-design")
    outputs = _outputs("new-design")
    bucket = runtime.settings.jobs_bucket
    # When the agent stores the list in S3 and reports the result that refers to it
    reference = write_output_list(runtime.client("s3"), bucket, "new-design", 1, outputs)
    result = TrainResult(
        seconds=1.0,
        outputs=reference,
        model_key="jobs/new-design/output/model/",
        model_sha256="0" * 64,
        log_key="jobs/new-design/logs/attempt-001.log",
    )
    runtime.client("stepfunctions").send_task_success(taskToken=token, output=result.model_dump_json())
    # Then the workflow goes on with a small result, and the archive step reads back every file from S3
    done = _finished(runtime, arn)
    assert done["status"] == "SUCCEEDED", done
    trained = TrainResult.model_validate(json.loads(done["output"])["trained"])
    assert (trained.outputs.count, trained.outputs.bytes) == (FILES, sum(item.size for item in outputs))
    assert len(result.model_dump_json()) < 1024
    assert read_output_list(S3Objects(runtime.settings.region), bucket, trained.outputs) == outputs
