"""The agent trusts no field of a command document: ids, names and paths are checked when it is read."""

from __future__ import annotations

import os
import stat
from typing import Any

import pytest
from pydantic import ValidationError

from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand, check_relative_path
from spotrun.model.job.ids import job_id_for
from spotrun.model.job.record import ManifestSource

GOOD_ID = "tiny-0123456789ab"


def document(**changes: Any) -> dict[str, Any]:
    command: dict[str, Any] = {
        "step": "stage",
        "job_id": GOOD_ID,
        "attempt": 1,
        "report_url": "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/agent/reports",
        "region": "us-east-1",
        "jobs_bucket": "spotrun-jobs-123456789012",
        "manifest": {
            "name": "tiny",
            "data": {"inputs": [{"source": "s3://data-bucket/in/", "destination": "in/"}]},
            "training": {"command": ["python", "train.py"]},
            "outputs": {"model": "model.npy"},
        },
        "heartbeat_seconds": 1,
        "poll_seconds": 1,
    }
    command.update(changes)
    return command


def refusal(**changes: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        AgentCommand.model_validate(document(**changes))
    return str(caught.value)


def test_a_command_as_the_control_plane_writes_it_is_accepted():
    # Given / When
    command = AgentCommand.model_validate(document(region="us-gov-west-1", jobs_bucket="a.b-c"))

    # Then
    assert command.job_id == GOOD_ID


@pytest.mark.parametrize(
    "name",
    [
        "tiny",
        "a",
        "x" * 48,
        "a-" * 24,
        "Nightly Retrain!",
        "--",
        "job-with-many-dashes---at-the-end-of-it-yes",
    ],
)
def test_every_job_id_the_control_plane_mints_has_the_job_id_shape(name):
    # Given a submission of a manifest with that name
    source = ManifestSource(kind="s3", bucket="jobs", key=f"manifests/{name}.yaml", etag="e")

    # When / Then
    assert layout.check_job_id(job_id_for(name, source))


@pytest.mark.parametrize(
    "job_id",
    ["../../../x", "tiny-0123456789ab/..", "tiny-0123456789ab\x00", "/tiny-0123456789ab", "tiny-1", ""],
)
def test_a_job_id_not_of_the_minted_shape_is_refused(job_id):
    # Given / When / Then
    assert "job_id" in refusal(job_id=job_id)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attempt", 0),
        ("step", "shell"),
        ("region", "us-east-1; curl evil"),
        ("region", "../x"),
        ("jobs_bucket", "../other"),
        ("jobs_bucket", "a..b"),
        ("jobs_bucket", "Bucket"),
    ],
)
def test_a_field_out_of_its_shape_is_refused(field, value):
    # Given / When / Then
    assert field in refusal(**{field: value})


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/v1/agent/reports",
        "https://a1b2.execute-api.us-east-1.amazonaws.com.evil.example/v1/agent/reports",
        "https://a1b2.execute-api.us-east-1.amazonaws.com/v1/jobs",
        "http://a1b2.execute-api.us-east-1.amazonaws.com/v1/agent/reports",
        "http://10.0.0.5:8080/agent/reports",
    ],
)
def test_a_report_url_that_is_not_the_apis_agent_route_is_refused(url):
    # Given / When / Then: the instance's signed reports go to the deployment's API only
    assert "is not the agent route of a spotrun API" in refusal(report_url=url)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/v1/agent/reports",
        "http://127.0.0.1:8123/agent/reports",
        "http://127.0.0.1:8123/v1/agent/reports",
    ],
)
def test_the_apis_agent_route_or_none_is_accepted_as_report_url(url):
    # Given / When / Then (none: a notice command answers nobody)
    assert AgentCommand.model_validate(document(report_url=url)).report_url == url


def test_an_unknown_field_is_refused_not_ignored():
    # Given / When / Then
    assert "nvme_root" in refusal(nvme_root="/")


def test_a_data_destination_with_a_nul_is_refused():
    # Given a destination holding a NUL
    manifest = document()["manifest"]
    manifest["data"]["inputs"][0]["destination"] = "in\x00/x"

    # When / Then: the manifest's own rule refuses it on the instance too, before the agent's second check
    assert "manifest.data.inputs.0.destination" in refusal(manifest=manifest)


def test_a_model_path_with_a_nul_is_refused():
    # Given
    manifest = document()["manifest"]
    manifest["outputs"]["model"] = "model\x00.npy"

    # When / Then
    assert "manifest.outputs.model" in refusal(manifest=manifest)
    assert "NUL" in refusal(manifest=manifest)


def test_the_nvme_layout_refuses_a_job_id_that_leaves_the_root(tmp_path):
    # Given / When / Then: the second wall, behind the command's own validation
    with pytest.raises(ValueError, match="not a spotrun job id"):
        layout.NvmeLayout(tmp_path, "../../../x")


def test_job_directories_are_created_for_the_agent_user_only_whatever_the_umask(tmp_path):
    # Given a permissive umask and a job root left wide open by an earlier run
    job = layout.NvmeLayout(tmp_path, GOOD_ID)
    job.root.mkdir(parents=True, mode=0o777)
    job.root.chmod(0o777)
    previous = os.umask(0)
    try:
        # When
        job.create()
    finally:
        os.umask(previous)

    # Then every directory is 0700, and the umask is as it was
    for directory in (job.root.parent, job.root, job.data_dir, job.code_dir, job.checkpoint_dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for directory in (job.output_dir, job.log_dir, job.runtime_dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert os.umask(previous) == previous


def test_a_job_directory_replaced_by_a_link_is_refused(tmp_path):
    # Given an output directory that an earlier run's training code replaced with a link
    job = layout.NvmeLayout(tmp_path / "nvme", GOOD_ID)
    job.create()
    job.output_dir.rmdir()
    (tmp_path / "elsewhere").mkdir()
    job.output_dir.symlink_to(tmp_path / "elsewhere")

    # When / Then
    with pytest.raises(ValueError, match="symbolic link"):
        job.create()


@pytest.mark.parametrize("path", ["/etc/hostname", "a/../../b", "..", "", "a\x00b"])
def test_a_path_that_leaves_its_directory_is_not_a_relative_path(path):
    # Given / When / Then: the manifest refuses the first ones already; the agent's check does not rely on it
    with pytest.raises(ValueError, match="is not a relative path inside its directory"):
        check_relative_path(path, "field")


@pytest.mark.parametrize("path", ["model", "model/", ".", "a/b.npy", "..hidden", "a/.b"])
def test_a_relative_path_inside_its_directory_is_accepted(path):
    # Given / When / Then
    assert check_relative_path(path, "field") == path
