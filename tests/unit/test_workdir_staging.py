"""A code archive (training.code ending .tar.gz) on the instance: staged verified, extracted, hostile ones refused;
and the job's credentials read exactly that object."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from spotrun.agent.steps.code_archive import archive_file, plan_code, unpack_code
from spotrun.agent.transfer.download import StagingError, stage
from spotrun.cli.workdir.pack import packed
from spotrun.local.iam.policy.evaluate import allowed
from spotrun.model import layout
from spotrun.model.agent_protocol.session_policy import job_session_policy
from spotrun.model.manifest.schema import JobManifest
from tests.unit.test_staging import BUCKET, FakeS3

JOB = "tiny-0123456789ab"


def archive_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, body in members:
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body) if body else None)
    return out.getvalue()


def member(name: str, **fields) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def staged(tmp_path: Path, body: bytes, key: str | None = None) -> tuple[str, layout.NvmeLayout]:
    """Put ``body`` at its content address in a fake S3 and stage it as training.code; return the URI."""
    s3 = FakeS3()
    key = key or layout.code_archive_key(hashlib.sha256(body).hexdigest())
    s3.put(key, body)
    job_layout = layout.NvmeLayout(tmp_path / "nvme", JOB)
    job_layout.create()
    uri = f"s3://{BUCKET}/{key}"
    items = plan_code(s3, uri, job_layout)
    stage(s3, items, root=job_layout.root)
    return uri, job_layout


def test_a_packed_workdir_is_staged_verified_and_extracted_into_the_code_directory(tmp_path):
    # Given a workdir packed by the CLI, at its content address, and a stale file in the code directory
    source = tmp_path / "project"
    (source / "pkg").mkdir(parents=True)
    (source / "train.py").write_text("print('train')")
    (source / "pkg" / "mod.py").write_text("X = 1")
    with packed(source) as archive:
        body = archive.path.read_bytes()
    # When it is staged and unpacked
    uri, job_layout = staged(tmp_path, body)
    (job_layout.code_dir / "stale.py").write_text("old")
    files = unpack_code(uri, job_layout)
    # Then the code directory holds exactly the workdir's files, and the downloaded archive is gone
    assert files == 2
    found = sorted(p.relative_to(job_layout.code_dir).as_posix() for p in job_layout.code_dir.rglob("*"))
    assert found == ["pkg", "pkg/mod.py", "train.py"]
    assert (job_layout.code_dir / "train.py").read_text() == "print('train')"
    assert not archive_file(job_layout).exists()


def test_the_archive_is_checked_against_the_digest_its_key_names(tmp_path):
    # Given an object at a content address whose bytes are not that content
    body = archive_of((member("train.py"), b"x"))
    wrong = layout.code_archive_key("0" * 64)
    # When it is staged, Then the check against the key's digest fails the staging
    with pytest.raises(StagingError, match="SHA-256 differs from the expected digest"):
        staged(tmp_path, body, key=wrong)


@pytest.mark.parametrize(
    ("hostile", "why"),
    [
        (member("../outside.py"), "outside the destination"),
        (
            member("escape", type=tarfile.SYMTYPE, linkname="../../../../etc/passwd"),
            "outside the destination",
        ),
        (member("dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3), "special file"),
    ],
    ids=["dot-dot", "link-out", "device"],
)
def test_a_hostile_archive_is_refused_and_leaves_nothing(tmp_path, hostile, why):
    # Given an archive with a good file and a hostile member
    body = archive_of((member("good.py"), b"ok"), (hostile, b""))
    uri, job_layout = staged(tmp_path, body)
    # When it is unpacked, Then staging fails naming the problem, and no half of it is kept
    with pytest.raises(StagingError, match=why):
        unpack_code(uri, job_layout)
    assert list(job_layout.code_dir.iterdir()) == []
    assert not (tmp_path / "outside.py").exists()
    assert [p.name for p in job_layout.root.iterdir() if p.name.startswith(".code-")] == []


def test_an_absolute_member_lands_inside_the_code_directory(tmp_path):
    # Given an archive whose member names an absolute path
    uri, job_layout = staged(tmp_path, archive_of((member("/tmp/spotrun-abs-test/x.py"), b"ok")))
    # When it is unpacked, Then the data filter strips the leading slash: it stays under the code directory
    assert unpack_code(uri, job_layout) == 1
    assert (job_layout.code_dir / "tmp" / "spotrun-abs-test" / "x.py").read_bytes() == b"ok"
    assert not Path("/tmp/spotrun-abs-test/x.py").exists()


def test_a_prefix_is_still_staged_file_by_file(tmp_path):
    # Given code under a prefix (no trailing slash)
    s3 = FakeS3()
    s3.put("examples/code/train.py", b"print(1)")
    job_layout = layout.NvmeLayout(tmp_path / "nvme", JOB)
    job_layout.create()
    # When it is planned and unpacked, Then it maps into the code directory and there is nothing to extract
    (item,) = plan_code(s3, f"s3://{BUCKET}/examples/code", job_layout)
    assert item.destination == job_layout.code_dir / "train.py"
    assert unpack_code(f"s3://{BUCKET}/examples/code", job_layout) == 0


def test_the_jobs_credentials_read_its_archive_and_nothing_beside_it():
    # Given a job whose code is an archive in the jobs bucket
    key = layout.code_archive_key("a" * 64)
    manifest = JobManifest.model_validate(
        {"name": "tiny", "training": {"command": ["python", "train.py"], "code": f"s3://{BUCKET}/{key}"}}
    )
    # When its session policy is built
    policy = job_session_policy(JOB, 1, manifest, jobs_bucket=BUCKET)
    # Then it reads that object, not a prefix of that name nor another archive
    objects = f"arn:aws:s3:::{BUCKET}"
    assert allowed(policy["Statement"], "s3:GetObject", f"{objects}/{key}")
    assert not allowed(policy["Statement"], "s3:GetObject", f"{objects}/{key}/x")
    assert not allowed(policy["Statement"], "s3:GetObject", f"{objects}/{layout.code_archive_key('b' * 64)}")
