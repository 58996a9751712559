"""The agent's SSM document: a strict pattern for its one parameter, no shell interpolation of the value, and
exactly one of its two ways (hand the URI to the resident agent, or start ``spotrun-agent run``) runs a step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotrun.agent.supervision.notice_relay import process_start_time
from spotrun.local.patches.ssm import check_parameters
from spotrun.model.agent_protocol.ssm_document import (
    AGENT_COMMAND_URI_PATTERN,
    AGENT_COMMAND_VARIABLE,
    AGENT_LOG_LINE,
    AGENT_RUN_DIR_LINE,
    agent_script,
)
from spotrun.model.job.ids import job_id_for
from spotrun.model.job.record import ManifestSource
from spotrun.model.layout import AGENT_INBOX, AGENT_PID_FILE, agent_command_key
from spotrun.shape import SHAPE

GOOD = "s3://spotrun-jobs-000000000000/" + agent_command_key("tiny-0123456789ab", 1, "train")
HOSTILE = [
    GOOD + "; touch pwned",
    GOOD + "$(touch pwned)",
    GOOD.replace("tiny", "$(id)"),
    GOOD + "`touch pwned`",
    GOOD + "\ntouch pwned",
    GOOD + "\n",
    "s3://bucket;id/" + agent_command_key("tiny-0123456789ab", 1, "train"),
    "s3://spotrun-jobs/jobs/../manifests/agent/attempt-001-train.json",
    "s3://spotrun-jobs/jobs/tiny-0123456789ab/agent/attempt-001-other.json",
    "s3://spotrun-jobs/manifests/tiny-0123456789ab/agent/attempt-001-train.json",
]


def _script() -> str:
    (step,) = SHAPE.agent_document()["mainSteps"]
    return "\n".join(step["inputs"]["runCommand"])


def test_the_script_reads_the_uri_from_the_environment_quoted_and_never_as_text() -> None:
    # Given the document the stack deploys and the emulator registers
    document = SHAPE.agent_document()
    parameter = document["parameters"]["commandUri"]

    # Then the value is an environment variable (ENV_VAR), the script names no {{ }} parameter at all, and it
    # only expands the variable inside double quotes
    assert parameter["interpolationType"] == "ENV_VAR"
    assert AGENT_COMMAND_VARIABLE == "SSM_commandUri"
    script = _script()
    assert "{{" not in script
    assert f'--command-uri "${AGENT_COMMAND_VARIABLE}"' in script
    # every expansion is quoted: the test of the first line, then only ever "$SSM_commandUri"
    expansions = re.findall(r".?\$\{?SSM_commandUri.?", script)
    assert expansions[0] == '"${SSM_commandUri:'
    assert set(expansions[1:]) == {'"$SSM_commandUri"'}
    assert len(expansions) == 3  # the test, the hand-over, the fallback
    assert script.splitlines()[0].startswith(f'test -n "${{{AGENT_COMMAND_VARIABLE}:-}}" || {{')


@given(
    name=st.from_regex(r"[a-z0-9][a-z0-9\-]{0,60}", fullmatch=True),
    key=st.text(min_size=1, max_size=40),
    attempt=st.integers(min_value=1, max_value=99_999),
    step=st.sampled_from(["stage", "train", "notice"]),
)
def test_every_key_the_control_plane_writes_matches_the_pattern(
    name: str, key: str, attempt: int, step: str
) -> None:
    # Given a job id as the control plane mints it and one of its command keys
    job_id = job_id_for(name, ManifestSource(bucket="b", key=key, etag="e"))
    uri = f"s3://spotrun-jobs-000000000000/{agent_command_key(job_id, attempt, step)}"

    # Then SendCommand's pattern admits it
    assert re.fullmatch(AGENT_COMMAND_URI_PATTERN, uri)


@pytest.mark.parametrize("uri", HOSTILE)
def test_send_command_refuses_shell_syntax_and_foreign_keys(uri: str) -> None:
    # Given the document's declarations
    document = SHAPE.agent_document()

    # When SendCommand's parameters are checked against them, Then a value outside the pattern is refused
    with pytest.raises(Exception, match="commandUri") as refused:
        check_parameters(document, {"commandUri": [uri]})
    assert refused.value.code == "InvalidParameters"  # type: ignore[attr-defined]


def test_a_valid_uri_becomes_the_scripts_environment_and_undeclared_or_missing_parameters_are_refused() -> (
    None
):
    # Given the document's declarations
    document = SHAPE.agent_document()

    # Then a valid URI is handed over as SSM_commandUri, and unknown or missing parameters answer InvalidParameters
    assert check_parameters(document, {"commandUri": [GOOD]}) == {AGENT_COMMAND_VARIABLE: GOOD}
    with pytest.raises(Exception, match="not defined") as unknown:
        check_parameters(document, {"commandUri": [GOOD], "extra": ["x"]})
    with pytest.raises(Exception, match="required") as missing:
        check_parameters(document, {})
    assert unknown.value.code == missing.value.code == "InvalidParameters"  # type: ignore[attr-defined]
    # ...and a parameter without ENV_VAR is not put in the environment
    plain = json.loads(json.dumps(document))
    del plain["parameters"]["commandUri"]["interpolationType"]
    assert check_parameters(plain, {"commandUri": [GOOD]}) == {}


# -- the script's two ways, played with /bin/sh against a fake spotrun-agent and a temporary inbox -----------------

# It writes its arguments aside and renames them into place: the test polls for the file, and a file being written
# in place (the redirection creates it empty first) read as no arguments under load.
FAKE_AGENT = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/../fallback.args.part"
mv "$(dirname "$0")/../fallback.args.part" "$(dirname "$0")/../fallback.args"
"""
# A stand-in resident agent: it records the wake signal (whose default action would ignore it).
STAND_IN_RESIDENT = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGWINCH, lambda *_: Path(sys.argv[1], "woken").touch())
Path(sys.argv[1], "ready").touch()
time.sleep(60)
"""


class Instance:
    """A temporary instance: its run directory, its log, a fake spotrun-agent on PATH."""

    def __init__(self, root: Path, inbox: bool = True):
        self.root = root
        self.run = root / "run"
        self.inbox = self.run / AGENT_INBOX
        (self.inbox if inbox else self.run).mkdir(parents=True)
        (root / "bin").mkdir()
        fake = root / "bin" / "spotrun-agent"
        fake.write_text(FAKE_AGENT)
        fake.chmod(0o755)
        self.resident: subprocess.Popen[bytes] | None = None

    def start_resident(self, start_time: int | None = None) -> int:
        self.resident = subprocess.Popen([sys.executable, "-c", STAND_IN_RESIDENT, str(self.root)])
        deadline = time.monotonic() + 20
        while not (self.root / "ready").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        pid = self.resident.pid
        recorded = process_start_time(pid) if start_time is None else start_time
        (self.run / AGENT_PID_FILE).write_text(f"{pid} {recorded}\n")
        return pid

    def play(self, uri: str) -> None:
        script = "\n".join(agent_script())
        script = script.replace(AGENT_RUN_DIR_LINE, f"spotrun_run={self.run}")
        script = script.replace(AGENT_LOG_LINE, f"spotrun_log={self.root / 'agent.log'}")
        env = {"PATH": f"{self.root / 'bin'}:/usr/bin:/bin", AGENT_COMMAND_VARIABLE: uri}
        subprocess.run(["/bin/sh", "-c", script], env=env, check=True, timeout=20, cwd=self.root)

    def fallback_args(self, expected: bool) -> list[str] | None:
        path = self.root / "fallback.args"
        if expected:  # it runs detached: wait for it
            deadline = time.monotonic() + 20
            while not path.exists():
                assert time.monotonic() < deadline, "the fallback never ran"
                time.sleep(0.02)
        return path.read_text().splitlines() if path.exists() else None

    def inbox_files(self) -> dict[str, str]:
        if not self.inbox.is_dir():
            return {}
        return {entry.name: entry.read_text() for entry in self.inbox.iterdir()}

    def close(self) -> None:
        if self.resident is not None:
            self.resident.kill()
            self.resident.wait()


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[Instance]:
    made = Instance(tmp_path)
    yield made
    made.close()


def test_a_live_resident_agent_gets_the_uri_in_its_inbox_and_nothing_else_starts(instance: Instance) -> None:
    # Given a live resident agent named by its pid file
    instance.start_resident()

    # When the document's script runs
    instance.play(GOOD)

    # Then exactly one published file holds the URI (no temporary left), it was woken, and no fallback ran
    files = instance.inbox_files()
    assert list(files.values()) == [GOOD + "\n"]
    assert not next(iter(files)).startswith(".")
    assert instance.fallback_args(expected=False) is None
    deadline = time.monotonic() + 20
    while not (instance.root / "woken").exists():
        assert time.monotonic() < deadline, "the resident agent was never woken"
        time.sleep(0.02)


@pytest.mark.parametrize("case", ["no-pid-file", "recycled-pid", "dead-pid", "no-inbox"])
def test_without_a_live_resident_agent_the_script_starts_spotrun_agent_run_and_hands_over_nothing(
    tmp_path: Path, case: str
) -> None:
    # Given no resident agent: no pid file, a pid file naming another process (its start time differs), one
    # naming a process that ended, or a live agent without an inbox to hand over to
    instance = Instance(tmp_path, inbox=case != "no-inbox")
    try:
        if case == "recycled-pid":
            instance.start_resident(start_time=1)
        elif case == "dead-pid":
            ended = subprocess.run(["/bin/sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
            (instance.run / AGENT_PID_FILE).write_text(f"{ended.stdout.strip()} 1\n")
        elif case == "no-inbox":
            instance.start_resident()

        # When the document's script runs
        instance.play(GOOD)

        # Then the fallback ran the step, with the URI as one argument, and nothing was left in the inbox
        assert instance.fallback_args(expected=True) == ["run", "--command-uri", GOOD]
        assert instance.inbox_files() == {}
    finally:
        instance.close()


@pytest.mark.parametrize("resident", [True, False], ids=["handed-over", "fallback"])
def test_shell_syntax_in_the_value_reaches_either_way_as_one_unexpanded_argument(
    instance: Instance, resident: bool
) -> None:
    # Given a value SendCommand's pattern would refuse (the script must not depend on that)
    hostile = GOOD + "$(touch pwned); touch pwned `touch pwned`"
    if resident:
        instance.start_resident()

    # When the document's script runs with it
    instance.play(hostile)

    # Then it arrived verbatim, and nothing of it was executed
    if resident:
        assert list(instance.inbox_files().values()) == [hostile + "\n"]
    else:
        assert instance.fallback_args(expected=True) == ["run", "--command-uri", hostile]
    assert not (instance.root / "pwned").exists()
