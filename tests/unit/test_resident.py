"""The resident agent: it claims each inbox file once, forks a child per command, and outlives what goes wrong."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotrun.agent.resident_server import EXIT_STEP_CRASHED, WAKE_SIGNAL, RunDirectory
from spotrun.agent.supervision.notice_relay import process_start_time

# A resident agent whose steps are stand-ins: each records what it saw in OUT/<last part of the URI>.json.
STAND_IN = """
import json, logging, os, sys, time
from pathlib import Path
from spotrun.agent.supervision.spot_notices import NoticeWatcher
from spotrun.agent.supervision.notice_relay import NoticeChannel, deliver_notice
from spotrun.agent.resident_server import Resident, RunDirectory

run_dir, out, poll = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
pid_file = out / "train.pid"

def record(name, **extra):
    document = {"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), **extra}
    (out / f".{name}").write_text(json.dumps(document))
    (out / f".{name}").replace(out / f"{name}.json")

def run_step(uri):
    name = uri.rsplit("/", 1)[-1]
    if name.startswith("exit-"):
        record(name)
        return int(name.removeprefix("exit-"))
    if name == "crash":
        record(name)
        raise RuntimeError("the step raised")
    if name == "train":  # like a train step: a notice channel, then wait for the notice
        watcher = NoticeWatcher(None, 1.0)
        with NoticeChannel(pid_file, watcher, "job", 1):
            record("train-ready")
            deadline = time.monotonic() + 20
            while watcher.interruption() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        notice = watcher.interruption()
        record(name, notice=notice.source if notice else None)
        return 0
    if name == "notice":  # like a notice command: signal the train step through its pid file
        record(name, outcome=deliver_notice(pid_file)[0])
        return 0
    if name == "sleep":
        record(name)
        time.sleep(30)
        return 0
    record(name)
    return 0

logging.basicConfig(stream=sys.stderr, level="INFO", format="%(message)s")
sys.exit(Resident(RunDirectory(run_dir), run_step, poll_seconds=poll).serve())
"""


class Served:
    """A running stand-in resident agent."""

    def __init__(self, tmp_path: Path, poll_seconds: float, run_dir: Path | None = None):
        self.run_dir = RunDirectory(run_dir or tmp_path / "run")
        self.out = tmp_path / "out"
        self.out.mkdir(parents=True)
        self.log = tmp_path / "resident.log"
        script = tmp_path / "stand_in_resident.py"
        script.write_text(STAND_IN)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), str(self.run_dir.root), str(self.out), str(poll_seconds)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_for(lambda: self.run_dir.pid_file.exists(), "the pid file")

    def wait_for(self, condition: Any, what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None or what == "exit", (
                f"the resident agent died: {self.log.read_text()}"
            )
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.log.read_text()}"
            time.sleep(0.02)

    def publish(self, name: str, content: bytes | None = None, wake: bool = True) -> None:
        """Hand over a command as the document's script does: a dot-file, then its final name."""
        temporary = self.run_dir.inbox / f".tmp-{name}"
        temporary.write_bytes(content if content is not None else f"s3://jobs/agent/{name}\n".encode())
        os.link(temporary, self.run_dir.inbox / name)
        temporary.unlink()
        if wake:
            os.kill(self.proc.pid, WAKE_SIGNAL)

    def record(self, name: str) -> dict[str, Any]:
        path = self.out / f"{name}.json"
        self.wait_for(path.exists, f"the step {name}")
        return json.loads(path.read_text())  # type: ignore[no-any-return]

    def exit_line(self, pid: int) -> str:
        def logged() -> list[str]:
            return [line for line in self.log.read_text().splitlines() if f"step child {pid} for" in line]

        self.wait_for(lambda: any("exited with status" in line for line in logged()), f"child {pid} reaped")
        return logged()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    resident = Served(tmp_path_factory.mktemp("resident"), poll_seconds=0.2)
    yield resident
    resident.stop()


def test_each_command_runs_in_a_child_of_its_own_whose_exit_status_is_logged(served: Served) -> None:
    # Given the serving resident agent
    # When two commands are handed over
    served.publish("exit-0")
    served.publish("exit-3")
    first, second = served.record("exit-0"), served.record("exit-3")

    # Then each ran in its own child of the resident agent, in a session of its own, and its status is logged
    assert first["ppid"] == second["ppid"] == served.proc.pid
    assert first["pid"] != second["pid"]
    assert first["sid"] == first["pid"]
    assert "s3://jobs/agent/exit-0 exited with status 0 " in served.exit_line(first["pid"])
    assert "s3://jobs/agent/exit-3 exited with status 3 " in served.exit_line(second["pid"])
    # ...and every file was claimed and removed
    assert list(served.run_dir.inbox.iterdir()) == []


def test_a_crashed_child_ends_only_itself(served: Served) -> None:
    # Given / When a step raises out of the child
    served.publish("crash")
    crashed = served.record("crash")

    # Then the child exits with EX_SOFTWARE, and the parent serves the next command
    assert f"exited with status {EXIT_STEP_CRASHED} " in served.exit_line(crashed["pid"])
    served.publish("after-crash")
    assert served.record("after-crash")["ppid"] == served.proc.pid


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe not utf-8\n", b"s3://" + b"a" * 5000 + b"\n", b"s3://a/b\ns3://a/c\n", b"", b"rm -rf /\n"],
    ids=["binary", "too-long", "two-lines", "empty", "not-a-uri"],
)
def test_a_bad_inbox_file_is_dropped_and_the_parent_serves_on(served: Served, content: bytes) -> None:
    # Given a file that holds no command URI
    name = f"bad-{len(content)}-{content[:2].hex()}"
    served.publish(name, content)

    # When a good command follows
    served.publish(f"good-after-{name}")

    # Then the bad one ran nothing and was removed, and the good one ran
    assert served.record(f"good-after-{name}")["ppid"] == served.proc.pid
    assert not (served.out / f"{name}.json").exists()
    served.wait_for(lambda: f"inbox file {name} dropped, nothing runs" in served.log.read_text(), "the drop")
    assert not (served.run_dir.inbox / name).exists()


def test_entries_that_are_no_regular_file_are_dropped(served: Served) -> None:
    # Given a directory, a symlink to a good command and a FIFO holding one, published in the inbox
    target = served.out / "elsewhere"
    target.write_text("s3://jobs/agent/through-symlink\n")
    (served.run_dir.inbox / "a-directory").mkdir()
    (served.run_dir.inbox / "a-symlink").symlink_to(target)
    os.mkfifo(served.run_dir.inbox / "a-fifo")
    pipe = os.open(served.run_dir.inbox / "a-fifo", os.O_RDWR)  # Linux: opens without a reader
    try:
        os.write(pipe, b"s3://jobs/agent/through-fifo\n")
        os.kill(served.proc.pid, WAKE_SIGNAL)

        # When a good command follows
        served.publish("good-after-odd-entries")

        # Then none of them ran anything, all are gone, and the parent served the good one
        assert served.record("good-after-odd-entries")["ppid"] == served.proc.pid
        assert not (served.out / "through-symlink.json").exists()
        assert not (served.out / "through-fifo.json").exists()
        served.wait_for(lambda: list(served.run_dir.inbox.iterdir()) == [], "the inbox emptied")
    finally:
        os.close(pipe)


def test_a_notice_sent_through_another_command_reaches_the_train_step_child(served: Served) -> None:
    # Given a train step running in one child, with its notice channel open
    served.publish("train")
    ready = served.record("train-ready")

    # When a notice command runs in another child
    served.publish("notice")

    # Then the notice signal reached the train step's own child, which recorded the notice
    assert served.record("notice")["outcome"] == "delivered"
    train = served.record("train")
    assert train["pid"] == ready["pid"] != served.record("notice")["pid"]
    assert train["notice"] == "notice sent through SSM"


def test_a_wake_signal_takes_the_command_at_once(tmp_path: Path) -> None:
    # Given a resident agent that reads its inbox on its own only once a minute
    resident = Served(tmp_path, poll_seconds=60)
    try:
        # When a command is handed over with the wake signal
        resident.publish("woken")

        # Then it runs long before the next read of its own
        assert resident.record("woken")["ppid"] == resident.proc.pid
    finally:
        resident.stop()


def test_a_stopped_resident_agent_leaves_its_running_step_alone_and_frees_its_directory(
    tmp_path: Path,
) -> None:
    # Given a resident agent running a long step
    resident = Served(tmp_path, poll_seconds=0.2)
    try:
        resident.publish("sleep")
        step = resident.record("sleep")

        # When the resident agent is stopped
        resident.proc.send_signal(signal.SIGTERM)
        assert resident.proc.wait(10) == 0

        # Then its pid file is gone, the step still runs, and another resident agent can serve the directory
        assert not resident.run_dir.pid_file.exists()
        assert process_start_time(step["pid"]) is not None
        # ...which drops what an earlier parent had claimed but maybe not run (a step never runs twice)
        (resident.run_dir.inbox / ".claimed-stale").write_text("s3://jobs/agent/stale\n")
        successor = Served(tmp_path / "successor", poll_seconds=0.2, run_dir=resident.run_dir.root)
        try:
            successor.publish("exit-0")
            assert successor.record("exit-0")["ppid"] == successor.proc.pid
            assert not (resident.run_dir.inbox / ".claimed-stale").exists()
            assert not (successor.out / "stale.json").exists()
        finally:
            successor.stop()
    finally:
        resident.stop()
        os.kill(step["pid"], signal.SIGKILL)


def test_one_resident_agent_per_directory(served: Served) -> None:
    # Given the serving resident agent
    script = served.log.parent / "stand_in_resident.py"

    # When a second one starts on the same directory
    second = subprocess.run(
        [sys.executable, str(script), str(served.run_dir.root), str(served.out), "1"],
        timeout=20,
        capture_output=True,
    )

    # Then it refuses to serve, and the pid file still names the first
    assert second.returncode == 1
    assert b"another resident agent holds" in second.stdout + second.stderr
    pid, start = served.run_dir.pid_file.read_text().split()
    assert (int(pid), int(start)) == (served.proc.pid, process_start_time(served.proc.pid))


def test_the_run_directory_must_be_this_users_alone(tmp_path: Path) -> None:
    # Given a run directory that others can write
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.root.mkdir(mode=0o700)
    run_dir.root.chmod(0o733)

    # When / Then it is refused
    with pytest.raises(PermissionError, match="mode 0700"):
        run_dir.prepare()


def test_after_warm_up_new_sessions_load_no_botocore_data_from_disk() -> None:
    # Given a process that warmed up as the resident agent does
    probe = """
import boto3, botocore.loaders
from spotrun.agent.resident_server import warm
warm()
reads = []
original = botocore.loaders.JSONFileLoader.load_file
botocore.loaders.JSONFileLoader.load_file = lambda self, path: reads.append(path) or original(self, path)
for service in ("s3", "logs", "cloudwatch"):
    boto3.session.Session(region_name="eu-west-1").client(
        service, aws_access_key_id="a", aws_secret_access_key="b"
    )
print(len(reads))
"""
    # When it makes new sessions and clients, as a step child does
    reads = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )

    # Then none of them reads botocore's JSON again
    assert reads.stdout.split() == ["0"]


def test_the_shared_loader_serves_only_its_own_data_path_and_a_botocore_without_the_hook_is_left_alone() -> (
    None
):
    # Given a stand-in of botocore.session and a warmed loader
    from types import SimpleNamespace

    from spotrun.agent.resident_server import share_loader

    module = SimpleNamespace(create_loader=lambda search_path_string=None: ("fresh", search_path_string))
    warmed = object()

    # When the loader is shared for the default data path
    share_loader(module, warmed, None)

    # Then sessions of that path get it, sessions of another path a loader of their own
    assert module.create_loader(None) is warmed
    assert module.create_loader("/elsewhere") == ("fresh", "/elsewhere")
    # ...and a module without the hook is left as it is
    bare = SimpleNamespace()
    share_loader(bare, warmed, None)
    assert vars(bare) == {}
