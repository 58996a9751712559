"""The workdir packer: what git would track goes in, deterministically, within a size limit, no link out."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotrun.cli import schedules as schedules_cli
from spotrun.cli.app import app
from spotrun.cli.workdir.pack import WorkdirError, list_entries, packed
from spotrun.cli.workdir.upload import workdir_of


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def packed_names(root: Path) -> list[str]:
    with packed(root) as archive, tarfile.open(archive.path, "r:gz") as tar:
        return [member.name for member in tar.getmembers() if not member.isdir()]


def test_gitignore_spotrunignore_and_git_are_left_out(tmp_path):
    # Given a directory with a .git, a .gitignore and a .spotrunignore that re-includes one ignored file
    root = tree(
        tmp_path / "project",
        {
            "train.py": "print(1)",
            ".git/HEAD": "ref",
            ".gitignore": "*.log\nbuild/\n",
            ".spotrunignore": "data/\n!keep.log\n",
            "run.log": "x",
            "keep.log": "x",
            "build/out.bin": "x",
            "data/big.csv": "x",
            "pkg/mod.py": "x",
        },
    )
    # When it is packed
    names = packed_names(root)
    # Then what git (and then .spotrunignore) ignores is out, .git always, the re-included file in
    assert names == [".gitignore", ".spotrunignore", "keep.log", "pkg/mod.py", "train.py"]


def test_a_nested_gitignore_applies_below_its_directory_and_overrides_its_parents(tmp_path):
    # Given a root .gitignore ignoring *.txt, and one in sub/ ignoring *.py and re-including notes.txt
    root = tree(
        tmp_path / "project",
        {
            ".gitignore": "*.txt\n",
            "top.txt": "x",
            "top.py": "x",
            "sub/.gitignore": "*.py\n!notes.txt\n",
            "sub/inner.py": "x",
            "sub/notes.txt": "x",
            "sub/other.txt": "x",
            "sibling/inner.py": "x",
        },
    )
    # When it is packed
    names = packed_names(root)
    # Then sub's rules hold in sub only, and decide over the root's
    assert names == [".gitignore", "sibling/inner.py", "sub/.gitignore", "sub/notes.txt", "top.py"]


def test_an_unchanged_directory_packs_to_the_same_bytes(tmp_path):
    # Given a directory packed once
    root = tree(tmp_path / "project", {"train.py": "print(1)", "lib/util.py": "x = 1", "run.sh": "#!/bin/sh"})
    (root / "run.sh").chmod(0o755)
    with packed(root) as first:
        first_bytes = first.path.read_bytes()
    # When its files' times change and it is packed again
    for path in root.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))
    with packed(root) as second:
        second_bytes = second.path.read_bytes()
        digest = second.sha256
    # Then the archive and its digest are the same, with normalised owners, times and modes
    assert first_bytes == second_bytes
    assert first_bytes[4:8] == b"\0\0\0\0"  # the gzip header's mtime (RFC 1952)
    assert digest == first.sha256
    with tarfile.open(fileobj=io.BytesIO(second_bytes), mode="r:gz") as tar:
        members = {member.name: member for member in tar.getmembers()}
    assert list(members) == sorted(members)
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in members.values()} == {(0, 0, 0, "")}
    assert members["run.sh"].mode == 0o755
    assert members["train.py"].mode == 0o644
    # And a changed file changes the digest
    (root / "train.py").write_text("print(2)")
    with packed(root) as third:
        assert third.sha256 != digest


def test_past_the_limit_it_is_refused_naming_the_largest_files(tmp_path):
    # Given a directory holding two large files among small ones
    root = tree(tmp_path / "project", {"train.py": "x", "small.txt": "y" * 10})
    (root / "weights.bin").write_bytes(b"0" * 300_000)
    (root / "data.csv").write_bytes(b"1" * 200_000)
    # When it is packed with a limit below its size
    with pytest.raises(WorkdirError) as refused, packed(root, max_bytes=100_000):
        pass
    # Then the message says the size and the limit, names the largest files first, and how to fix it
    message = str(refused.value)
    assert "over the limit of 97.7 KiB" in message
    assert message.index("weights.bin") < message.index("data.csv") < message.index("small.txt")
    assert "293.0 KiB  weights.bin" in message
    assert ".spotrunignore" in message
    assert "--max-workdir-mib" in message


def test_a_link_leaving_the_directory_is_refused_and_one_inside_kept(tmp_path):
    # Given a directory with a link to a file inside it
    outside = tmp_path / "secret.txt"
    outside.write_text("s")
    root = tree(tmp_path / "project", {"train.py": "x", "lib/real.py": "y"})
    (root / "alias.py").symlink_to(root / "lib" / "real.py")
    # When it is listed, the inner link is kept, relative
    (entry,) = [e for e in list_entries(root) if e.name == "alias.py"]
    assert (entry.kind, entry.link_target) == ("link", "lib/real.py")
    # Then a link out of it is refused, naming it
    (root / "escape").symlink_to(outside)
    with pytest.raises(WorkdirError, match=r"escape is a symbolic link to .*secret\.txt, outside"):
        list_entries(root)
    # And once ignored, it no longer matters
    (root / ".spotrunignore").write_text("escape\n")
    assert "escape" not in [e.name for e in list_entries(root)]


def test_a_relative_workdir_is_relative_to_the_manifest_file_and_the_flag_to_the_cwd(tmp_path, monkeypatch):
    # Given a manifest in a directory of its own, naming a relative workdir
    manifest = {"training": {"workdir": "../code", "command": ["python", "train.py"]}}
    file = tmp_path / "jobs" / "manifest.yaml"
    monkeypatch.chdir(tmp_path)
    # When the workdir is resolved: without --workdir, against the manifest's directory; with it, the cwd's
    assert workdir_of(manifest, file, None) == (tmp_path / "code").resolve()
    assert workdir_of(manifest, file, Path("other")) == (tmp_path / "other").resolve()
    assert workdir_of({"training": {}}, file, None) is None


def test_validate_checks_that_the_workdir_is_a_directory(tmp_path):
    # Given a manifest naming a workdir beside it, which does not exist yet
    file = tmp_path / "manifest.yaml"
    file.write_text("name: tiny\ntraining:\n  workdir: src\n  command: [python, train.py]\n")
    # When it is validated, Then it is refused naming the directory; once it exists, it is valid
    missing = CliRunner().invoke(app, ["validate", str(file)])
    assert missing.exit_code == 1
    assert f"training.workdir: {tmp_path / 'src'} is not a directory" in missing.stderr
    (tmp_path / "src").mkdir()
    valid = CliRunner().invoke(app, ["validate", str(file)])
    assert valid.exit_code == 0, valid.stderr
    assert f"training.workdir is {tmp_path / 'src'}" in valid.stdout


def test_submit_workdir_is_refused_when_the_manifest_names_its_code(tmp_path):
    # Given a manifest whose code is in S3
    file = tmp_path / "manifest.yaml"
    file.write_text("name: tiny\ntraining:\n  code: s3://code-bucket/src/\n  command: [python, train.py]\n")
    # When it is submitted with --workdir, Then nothing is sent: the two sources of code are named
    result = CliRunner().invoke(app, ["submit", str(file), "--workdir", str(tmp_path)])
    assert result.exit_code == 1
    assert "training.code is set; --workdir would replace it" in result.stderr
    # And a size limit without any workdir is refused rather than ignored
    limited = CliRunner().invoke(app, ["submit", str(file), "--max-workdir-mib", "5"])
    assert limited.exit_code == 1
    assert "--max-workdir-mib limits a workdir, and there is none" in limited.stderr


class FakeApi:
    """The two routes `schedule create` calls with a workdir: the archive is there already."""

    def __init__(self) -> None:
        self.uploads: list[tuple[str, int]] = []
        self.created: list[dict] = []

    def code_upload(self, sha256: str, size: int) -> dict:
        self.uploads.append((sha256, size))
        return {"uri": f"s3://jobs/code/{sha256}.tar.gz", "upload": None}

    def create_schedule(self, manifest: dict) -> dict:
        self.created.append(manifest)
        return {"name": manifest["name"]}


def test_schedule_create_uploads_the_workdir_once_and_schedules_its_snapshot(tmp_path, monkeypatch):
    # Given a scheduled manifest naming a workdir beside it
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)")
    file = tmp_path / "nightly.yaml"
    file.write_text(
        "name: nightly\nschedule: {expression: rate(1 day)}\n"
        "training: {workdir: src, command: [python, train.py]}\n"
    )
    api = FakeApi()
    monkeypatch.setattr(schedules_cli, "api_client", lambda target: contextlib.nullcontext(api))
    # When its schedule is created
    result = CliRunner().invoke(app, ["schedule", "create", str(file)])
    # Then the schedule's manifest names the uploaded archive as its code, and no workdir
    assert result.exit_code == 0, result.stderr
    ((sha256, _),) = api.uploads
    (created,) = api.created
    assert created["training"]["code"] == f"s3://jobs/code/{sha256}.tar.gz"
    assert "workdir" not in created["training"]
