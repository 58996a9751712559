"""The agent's SSM document: a strict pattern for its one parameter, and no shell interpolation of the value."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotrun.local.ssm_patch import check_parameters
from spotrun.model.job import ManifestSource
from spotrun.model.job_ids import job_id_for
from spotrun.model.layout import agent_command_key
from spotrun.shape import AGENT_COMMAND_URI_PATTERN, AGENT_COMMAND_VARIABLE, SHAPE

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
    expansions = re.findall(r'.?\$\{?SSM_commandUri.?', script)
    assert expansions[0] == '"${SSM_commandUri:'
    assert set(expansions[1:]) == {'"$SSM_commandUri"'}
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
