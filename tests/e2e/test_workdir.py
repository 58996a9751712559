"""`spotrun submit` with a workdir against `spotrun local up`: packed, uploaded once, run; too large, refused."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.local.control_client import LocalState, read_state
from spotrun.local.demo import EXAMPLE_DIR
from spotrun.shape import REPO_ROOT

runner = CliRunner()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LocalState]]:
    """A `spotrun local up` in a process of its own, the example's data uploaded: its directory and state."""
    where = tmp_path_factory.mktemp("workdir-local")
    command = [sys.executable, "-m", "spotrun.cli.app", "local", "up", "--state-dir", str(where)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    up = subprocess.Popen(
        [*command, "--time-scale", "0.02"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not (where / "local.json").exists():
            assert up.poll() is None, up.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "`spotrun local up` wrote no state file"
            time.sleep(0.1)
        yield where, read_state(where)
    finally:
        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=60)


def code_objects(state: LocalState) -> dict[str, bytes]:
    s3 = boto3.client(
        "s3",
        endpoint_url=state.endpoint_url,
        region_name=state.settings.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = state.settings.jobs_bucket
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix="code/").get("Contents", [])]
    return {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def submit(local_dir: Path, *argv: str) -> Any:
    return runner.invoke(app, ["submit", *argv, "--state-dir", str(local_dir)])


def test_a_workdir_is_uploaded_once_and_runs_as_the_jobs_code(local, tmp_path):
    local_dir, state = local
    # Given the tiny example's script in a project directory of its own (its data in S3, as uploaded by
    # `local up`), a build output its .gitignore leaves out, and a manifest in another directory naming it
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(EXAMPLE_DIR / "train.py", project / "train.py")
    (project / ".gitignore").write_text("build/\n")
    (project / "build").mkdir()
    (project / "build" / "cache.bin").write_bytes(b"0" * 1024)
    document = yaml.safe_load((EXAMPLE_DIR / "manifest.yaml").read_text())
    del document["training"]["code"]
    document["training"]["workdir"] = "../project"
    document["training"]["command"] += ["--steps", "30"]
    file = tmp_path / "jobs" / "manifest.yaml"
    file.parent.mkdir()
    file.write_text(yaml.safe_dump(document))

    # When it is submitted and followed to its end
    first = submit(local_dir, str(file), "--wait", "--poll", "0.2")

    # Then the directory was uploaded at its content address, without what .gitignore leaves out, and ran
    assert first.exit_code == 0, first.output + first.stderr
    assert "status: SUCCEEDED" in first.stdout
    (key, archive), *others = code_objects(state).items()
    assert others == []
    assert f"code uploaded: s3://{state.settings.jobs_bucket}/{key}" in first.stdout
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        names = sorted(member.name for member in tar.getmembers() if member.isfile())
    assert names == [".gitignore", "train.py"]

    # When the unchanged directory is submitted again, with --json
    second = submit(local_dir, str(file), "--json", "--idempotency-key", f"again-{time.time_ns()}")

    # Then nothing is uploaded again, stdout is only the API's answer, and the job names the same archive
    assert second.exit_code == 0, second.output + second.stderr
    assert list(code_objects(state)) == [key]
    accepted = json.loads(second.stdout)
    assert second.stdout.strip().count("\n") == 0
    assert f"code unchanged: s3://{state.settings.jobs_bucket}/{key}" in second.stderr
    view = json.loads(
        runner.invoke(app, ["status", accepted["job_id"], "--json", "--state-dir", str(local_dir)]).stdout
    )
    assert view["job_id"] == accepted["job_id"]


def test_an_oversized_workdir_is_refused_naming_its_largest_files(local, tmp_path):
    local_dir, state = local
    # Given a directory holding a 2 MiB file, and a manifest with code set aside
    project = tmp_path / "big"
    project.mkdir()
    (project / "train.py").write_text("print(1)")
    (project / "weights.bin").write_bytes(b"0" * 2 * 1024 * 1024)
    file = tmp_path / "manifest.yaml"
    file.write_text(yaml.safe_dump({"name": "big", "training": {"command": ["python", "train.py"]}}))
    before = code_objects(state)

    # When it is submitted with --workdir and a limit of 1 MiB
    refused = submit(local_dir, str(file), "--workdir", str(project), "--max-workdir-mib", "1")

    # Then nothing is uploaded nor submitted: exit 1, the size, the limit and the largest file named
    assert refused.exit_code == 1
    assert "holds 2.0 MiB to upload, over the limit of 1.0 MiB" in refused.stderr
    assert "2.0 MiB  weights.bin" in refused.stderr
    assert refused.stdout == ""
    assert code_objects(state) == before
