"""Inputs and code that do not exist are refused before an instance is bought, at every entry point (moto):
`spotrun plan` through the in-process API, POST /jobs, the S3 drop with its rejection report, and a schedule's
firing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from typer.testing import CliRunner

from functions import scheduled_run, submit
from spotrun.aws.adapters import job_store
from spotrun.cli import jobs as cli_jobs
from spotrun.cli import plan as cli_plan
from spotrun.cli.app import app
from spotrun.cli.client import ApiError, SpotrunClient
from tests.integration.api_client import call
from tests.integration.test_intake_entry_points import report_of
from tests.integration.test_schedules import NIGHTLY, firing
from tests.integration.test_submit_handler import executions, put, s3_event

runner = CliRunner()


def manifest_with(deployment: Any, **data_and_code: str) -> dict[str, Any]:
    """A one-GPU manifest whose data input (``data``) and code (``code``) are keys of the jobs bucket."""
    bucket = deployment.jobs_bucket
    document: dict[str, Any] = {
        "name": "empty-prefix",
        "resources": {"gpu_names": ["t4", "a10g"]},
        "capacity": {"deadline": "36h"},
        "training": {"command": ["python", "train.py"], "expected_hours": 2},
    }
    if "data" in data_and_code:
        document["data"] = {
            "inputs": [{"source": f"s3://{bucket}/{data_and_code['data']}", "destination": "."}]
        }
    if "code" in data_and_code:
        document["training"]["code"] = f"s3://{bucket}/{data_and_code['code']}"
    return document


class InProcessClient(SpotrunClient):
    """The CLI's client, its requests answered by the API function in this process (on moto)."""

    def __init__(self, context: Any):
        super().__init__("https://in-process.example/v1", region="us-east-1")
        self._context = context

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = call(self._context, method, path, kwargs.get("body"), headers=kwargs.get("headers"))
        if answer.status >= 400:
            raise ApiError(answer.status, answer.body["message"], answer.body.get("errors") or [])
        return answer.body


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, lambda_context: Any) -> None:
    @contextmanager
    def in_process(_target: Any) -> Iterator[SpotrunClient]:
        yield InProcessClient(lambda_context)

    monkeypatch.setattr(cli_plan, "api_client", in_process)
    monkeypatch.setattr(cli_jobs, "api_client", in_process)


def write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_plan_refuses_a_manifest_whose_data_prefix_is_empty(deployment, cli, tmp_path):
    # Given a manifest whose code exists and whose data prefix holds nothing
    put(deployment, "code/train.py", b"print('hi')\n")
    file = write(tmp_path, manifest_with(deployment, data="datasets/empty/", code="code/"))
    # When `spotrun plan FILE --json` asks the API
    result = runner.invoke(app, ["plan", str(file), "--json"])
    # Then it exits 1 with one JSON object: the plan, whose one problem names the empty prefix, and its pools
    assert result.exit_code == 1, result.output
    answer = json.loads(result.stdout)
    assert answer.get("ok") is False, answer
    [problem] = answer["problems"]
    assert problem.startswith("data.inputs[0].source: no object under s3://spotrun-jobs-test/datasets/empty/")
    assert answer["first_pool"] == answer["pools"][0]
    assert answer["first_pool"]["first"] is True
    # And the estimate and the deadline policy's first decision are there, and nothing was submitted
    assert answer["estimate"]["hours"] == 2
    assert answer["deadline"].startswith("spot, slack ")
    assert executions(deployment) == []


def test_plan_passes_once_the_prefix_holds_data_and_the_table_marks_the_first_pool(deployment, cli, tmp_path):
    # Given the same manifest once the data is uploaded
    put(deployment, "code/train.py", b"print('hi')\n")
    put(deployment, "datasets/full/part-0.csv", b"1,2\n")
    file = write(tmp_path, manifest_with(deployment, data="datasets/full/", code="code/"))
    # When `spotrun plan FILE` shows it, and `submit --dry-run` too
    shown = runner.invoke(app, ["plan", str(file)])
    dry = runner.invoke(app, ["submit", str(file), "--dry-run", "--json"])
    # Then both exit 0 and say the job would start; the table marks the first pool; nothing is submitted
    assert shown.exit_code == 0, shown.output
    assert "no problem: submit would start the job" in shown.stdout
    assert "<- first" in shown.stdout
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["ok"] is True
    assert executions(deployment) == []


def test_submit_dry_run_refuses_wait_it_could_not_honour(deployment, cli, tmp_path):
    # Given any manifest
    file = write(tmp_path, manifest_with(deployment))
    # When --dry-run comes with --wait
    result = runner.invoke(app, ["submit", str(file), "--dry-run", "--wait", "--json"])
    # Then it is refused (exit 1, one JSON error), not half-honoured
    assert result.exit_code == 1
    assert "--dry-run submits nothing" in json.loads(result.stdout)["error"]["message"]


def test_post_jobs_refuses_the_empty_prefix_and_a_missing_code_archive(deployment, lambda_context):
    # Given a manifest whose data prefix is empty and whose code archive was never uploaded
    document = manifest_with(deployment, data="datasets/empty/", code="code/" + "0" * 64 + ".tar.gz")
    # When it is posted
    answer = call(lambda_context, "POST", "/jobs", document)
    # Then it is a 422 naming both, and nothing started
    assert answer.status == 422
    assert [line.split(":")[0] for line in answer.body["errors"]] == [
        "data.inputs[0].source",
        "training.code",
    ]
    assert "no object s3://spotrun-jobs-test/code/" in answer.body["errors"][1]
    assert executions(deployment) == []


def test_the_s3_drop_rejects_the_empty_prefix_with_its_report(deployment, lambda_context):
    # Given the same manifest dropped into manifests/
    key = "manifests/empty-prefix.json"
    etag = put(deployment, key, json.dumps(manifest_with(deployment, data="datasets/empty/")).encode())
    # When the submit function handles it
    result = submit.handler(s3_event(deployment.jobs_bucket, key, etag), lambda_context)
    # Then it is rejected: the report and the record name the prefix, and nothing runs
    assert result["outcome"] == "rejected"
    [line] = report_of(deployment, key)["errors"]
    assert line.startswith("data.inputs[0].source: no object under s3://spotrun-jobs-test/datasets/empty/")
    assert job_store(deployment.jobs_table, deployment.region).get(result["job_id"]).error.details == [line]
    assert executions(deployment) == []


def test_an_object_input_must_be_that_object_not_a_longer_key(deployment, lambda_context):
    # Given an input naming data.csv where only data.csv.bak exists
    put(deployment, "datasets/data.csv.bak", b"1\n")
    document = manifest_with(deployment, data="datasets/data.csv")
    # When it is posted
    answer = call(lambda_context, "POST", "/jobs", document)
    # Then it is refused: the listing's first key under "data.csv" is another object
    assert answer.status == 422
    assert answer.body["errors"][0].startswith(
        "data.inputs[0].source: no object s3://spotrun-jobs-test/datasets/data.csv"
    )


def test_a_schedule_firing_whose_inputs_are_gone_starts_nothing_and_says_why(deployment, lambda_context):
    # Given a schedule whose data prefix holds data when it is created
    put(deployment, "data/a.csv", b"1")
    created = call(lambda_context, "POST", "/schedules", NIGHTLY)
    assert created.status == 201, created.body
    # When the data is deleted and the schedule fires
    boto3.client("s3").delete_object(Bucket=deployment.jobs_bucket, Key="data/a.csv")
    run = scheduled_run.handler(firing(deployment, "2026-12-01T03:00:00Z"), lambda_context)
    # Then the firing is recorded as skipped, naming the empty prefix, and no job started
    assert run["outcome"] == "skipped"
    assert run["reason"].startswith(
        "not started: data.inputs[0].source: no object under s3://spotrun-jobs-test/data/"
    )
    assert executions(deployment) == []


def test_plan_packs_a_workdir_and_uploads_nothing(deployment, cli, tmp_path):
    # Given a manifest whose code is a local workdir
    code = tmp_path / "src"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    document = manifest_with(deployment)
    document["training"]["workdir"] = "src"
    file = write(tmp_path, document)
    # When it is planned
    result = runner.invoke(app, ["plan", str(file), "--json"])
    # Then the plan says what submit would upload, the workdir is no problem, and nothing reached the bucket
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["ok"] is True
    assert answer["workdir"]["files"] == 1
    assert answer["workdir"]["bytes"] > 0
    listed = boto3.client("s3").list_objects_v2(Bucket=deployment.jobs_bucket, Prefix="code/")
    assert listed.get("KeyCount", 0) == 0
