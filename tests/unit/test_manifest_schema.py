"""The manifest's JSON Schema states the model's rules: what it refuses, the model refuses, and the reverse.

Each case breaks one rule. The schema must refuse it (so removing a constraint from the schema fails a test) and
the model must refuse it too (so the schema does not refuse what spotrun accepts). The schema is checked by two
validators of different regex dialects: ``jsonschema`` (Python's ``re``) and ``jsonschema_rs`` (Rust's, closer
to ECMA-262), both already installed with schemathesis, which generates requests from the same patterns.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema
import jsonschema_rs
import pytest
from pydantic import ValidationError

from spotrun.model.manifest.parse import manifest_json_schema
from spotrun.model.manifest.rules import WHITE_SPACE, StrictModel
from spotrun.model.manifest.schema import JobManifest

SCHEMA = json.loads(manifest_json_schema())
PYTHON_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
RUST_VALIDATOR = jsonschema_rs.Draft202012Validator(SCHEMA)

MINIMAL: dict[str, Any] = {"name": "tiny", "training": {"command": ["python", "train.py"]}}


def manifest_with(path: str, value: Any) -> dict[str, Any]:
    """The minimal manifest with ``value`` at the dotted ``path`` (missing mappings are created)."""
    manifest = copy.deepcopy(MINIMAL)
    *parents, last = path.split(".")
    node = manifest
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return manifest


def schema_accepts(manifest: dict[str, Any]) -> bool:
    python, rust = PYTHON_VALIDATOR.is_valid(manifest), RUST_VALIDATOR.is_valid(manifest)
    assert python == rust, f"the two regex dialects disagree on {manifest}"
    return python


def model_accepts(manifest: dict[str, Any]) -> bool:
    try:
        JobManifest.model_validate(manifest)
    except ValidationError:
        return False
    return True


REFUSED = [
    pytest.param("name", "Bad-Name", id="name: upper case"),
    pytest.param("name", "-lead", id="name: leading dash"),
    pytest.param("name", "a" * 49, id="name: 49 characters"),
    pytest.param("name", " tiny", id="name: leading space"),
    pytest.param("training.command", ["python", ""], id="command: empty argument"),
    pytest.param("training.command", ["python", "   "], id="command: blank argument"),
    # White space as pydantic strips it (Unicode's White_Space), which ECMA-262's \s (schemathesis) does not all count
    pytest.param("training.command", ["python", "\x85\t"], id="command: argument of NEL and tab"),
    pytest.param("training.setup", [["\x0b\x0c\r\n \x85"]], id="setup: blank argument"),
    pytest.param("training.command", [" \x85 python train.py"], id="command: one shell string, NEL-padded"),
    pytest.param("training.command", ["\x1c \x85python"], id="command: one shell string after a separator"),
    pytest.param("training.command", ["python train.py"], id="command: one shell string"),
    pytest.param("training.command", [" python train.py "], id="command: one shell string, padded"),
    pytest.param("training.checkpoint.signal", "SIGKILL", id="signal: not a checkpoint signal"),
    pytest.param("training.env", {"MY-VAR": "x"}, id="env: dash in name"),
    pytest.param("training.env", {"1X": "x"}, id="env: leading digit"),
    pytest.param("training.env", {"SPOTRUN_DATA_DIR": "x"}, id="env: SPOTRUN_ prefix"),
    pytest.param("training.env", {"X": None}, id="env: null value"),
    pytest.param("training.env", {"X": ["a"]}, id="env: list value"),
    pytest.param("training.code", "https://bucket.s3.amazonaws.com/x", id="code: not s3://"),
    pytest.param("training.code", "s3://Bucket/x", id="code: upper-case bucket"),
    pytest.param("training.resume_from", "Job_1", id="resume_from: not a job id"),
    pytest.param("data.inputs", [{"source": "s3://b/x", "destination": "d"}], id="source: one-letter bucket"),
    pytest.param("data.inputs", [{"source": "s3://bkt/a\nb", "destination": "d"}], id="source: newline"),
    pytest.param(
        "data.inputs", [{"source": "s3://bkt/x", "destination": "/abs"}], id="destination: absolute"
    ),
    pytest.param("data.inputs", [{"source": "s3://bkt/x", "destination": "a/../b"}], id="destination: '..'"),
    pytest.param("data.inputs", [{"source": "s3://bkt/x", "destination": ""}], id="destination: empty"),
    pytest.param("outputs.model", "..", id="outputs.model: '..'"),
    pytest.param("outputs.model", "model/..", id="outputs.model: trailing '..'"),
    pytest.param("outputs.model", "/model", id="outputs.model: absolute"),
    pytest.param("outputs.model", "model\x00.pt", id="outputs.model: NUL"),
    pytest.param("data.inputs", [{"source": "s3://bkt/x", "destination": "d\x00"}], id="destination: NUL"),
    pytest.param("archive.destination", "gs://bucket/x", id="archive.destination: not s3://"),
    pytest.param("schedule", {"expression": "every day"}, id="schedule: not cron or rate"),
    pytest.param("schedule", {"expression": "rate(1 days)"}, id="schedule: plural for 1"),
    pytest.param("schedule", {"expression": "rate(2 minute)"}, id="schedule: singular for 2"),
    pytest.param("schedule", {"expression": "rate(0 minutes)"}, id="schedule: rate of 0"),
    pytest.param("schedule", {"expression": "cron(0 3 * * ?)"}, id="schedule: cron of 5 fields"),
    pytest.param("schedule", {"expression": " rate(1 day)"}, id="schedule: leading space"),
    pytest.param("resources", {"instance_types": ["G5.xlarge"]}, id="instance type: upper case"),
    pytest.param("resources", {"instance_types": ["g5"]}, id="instance type: no size"),
    pytest.param(
        "resources", {"instance_types": ["g5.xlarge"], "gpu_names": ["a10g"]}, id="resources: both lists"
    ),
    pytest.param(
        "capacity", {"spot": False, "on_demand_fallback": True}, id="capacity: fallback without spot"
    ),
    pytest.param("tags", {"bad!key": "v"}, id="tag key: '!'"),
    pytest.param("tags", {"": "v"}, id="tag key: empty"),
    pytest.param("tags", {"k" * 129: "v"}, id="tag key: 129 characters"),
    pytest.param("tags", {"aws:team": "v"}, id="tag key: aws: prefix"),
    pytest.param("tags", {"SpotRun:job": "v"}, id="tag key: spotrun: prefix, any case"),
    pytest.param("tags", {f"k{index}": "v" for index in range(41)}, id="tags: 41"),
    pytest.param("tags", {"team": "v" * 257}, id="tag value: 257 characters"),
    # No quiet conversions: a boolean or a text is not a number, a number or a text not a boolean.
    pytest.param("budget", {"max_usd": True}, id="max_usd: a boolean"),
    pytest.param("budget", {"max_usd": "5"}, id="max_usd: a text"),
    pytest.param("resources", {"gpus_per_node": True}, id="gpus_per_node: a boolean"),
    pytest.param("training.max_runtime_minutes", "60", id="max_runtime_minutes: a text"),
    pytest.param("capacity", {"spot": 1}, id="spot: a number"),
    pytest.param("capacity", {"on_demand_fallback": "true"}, id="on_demand_fallback: a text"),
]


@pytest.mark.parametrize(("path", "value"), REFUSED)
def test_the_schema_refuses_what_the_model_refuses(path: str, value: Any) -> None:
    # Given the minimal manifest with one rule broken
    manifest = manifest_with(path, value)
    # When the published schema and the model judge it
    by_schema, by_model = schema_accepts(manifest), model_accepts(manifest)
    # Then both refuse it
    assert not by_model, "the model accepts it: the case no longer breaks a rule"
    assert not by_schema, "the schema accepts what the model refuses: a constraint is missing from it"


ACCEPTED = [
    pytest.param("name", "a" * 48, id="name: 48 characters"),
    pytest.param("name", "0-start", id="name: leading digit"),
    pytest.param("training.command", ["python"], id="command: one word"),
    pytest.param("training.command", [" python "], id="command: one word, padded"),
    pytest.param("training.command", ["\x85python\x1c"], id="command: one word, NEL-padded"),
    pytest.param(
        "training.command", ["python", "\x1c\x1f"], id="command: separators are no white space to strip"
    ),
    pytest.param("training.command", ["python", "\ufeff"], id="command: a BOM is no white space to strip()"),
    pytest.param("training.command", ["python", "-c", "print(1 + 1)"], id="command: argument with spaces"),
    pytest.param("training.checkpoint.signal", "SIGUSR1", id="signal: SIGUSR1"),
    pytest.param("training.env", {"_X": "1", "OMP_NUM_THREADS": "4"}, id="env: ordinary names"),
    pytest.param("training.env", {"SPOTRUN": "x", "MY_SPOTRUN_X": "y"}, id="env: SPOTRUN not as prefix"),
    pytest.param("training.env", {"N": 4, "F": 0.5, "B": True}, id="env: numbers and booleans become text"),
    pytest.param("training.code", "s3://my.bucket-1", id="code: bucket only"),
    pytest.param("training.resume_from", "job-1", id="resume_from: job id"),
    pytest.param("data.inputs", [{"source": "s3://bkt/a b/", "destination": "./a"}], id="destination: './a'"),
    pytest.param("data.inputs", [{"source": "s3://bkt/x", "destination": "..."}], id="destination: '...'"),
    pytest.param(
        "data.inputs", [{"source": "s3://bkt/x", "destination": "a/..b/c.."}], id="destination: dots"
    ),
    pytest.param("data.inputs", [{"source": "s3://bkt/x", "destination": "a//b/"}], id="destination: '//'"),
    pytest.param("outputs.model", "out/model.pt", id="outputs.model: nested"),
    pytest.param("archive.destination", "s3://archive/models/", id="archive.destination: prefix"),
    pytest.param("schedule", {"expression": "rate(1 day)"}, id="schedule: rate(1 day)"),
    pytest.param("schedule", {"expression": "rate(15 minutes)"}, id="schedule: rate(15 minutes)"),
    pytest.param("schedule", {"expression": "cron(0 3 ? * MON-FRI *)"}, id="schedule: cron"),
    pytest.param("resources", {"instance_types": ["g5.xlarge", "p4d.24xlarge"]}, id="instance types"),
    pytest.param("capacity", {"spot": False}, id="capacity: on-demand"),
    pytest.param("capacity", {"max_price_per_hour": 1}, id="max_price_per_hour: an integer is a number"),
    pytest.param("training.max_runtime_minutes", 910.0, id="max_runtime_minutes: an integral float"),
    pytest.param("capacity", {"on_demand_fallback": True}, id="capacity: spot with fallback"),
    pytest.param("tags", {"cost center": "ml", "a:b/c=d+e-f@g_h.i": ""}, id="tag keys: allowed characters"),
    pytest.param("tags", {"awsome": "v", "k" * 128: "v" * 256}, id="tags: at the bounds"),
    pytest.param("tags", {f"k{index}": "v" for index in range(40)}, id="tags: 40"),
]


@pytest.mark.parametrize(("path", "value"), ACCEPTED)
def test_the_schema_accepts_what_the_model_accepts(path: str, value: Any) -> None:
    # Given the minimal manifest with a value at the edge of a rule, but within it
    manifest = manifest_with(path, value)
    # When the published schema and the model judge it
    by_schema, by_model = schema_accepts(manifest), model_accepts(manifest)
    # Then both accept it
    assert by_model, "the model refuses it"
    assert by_schema, "the schema refuses what the model accepts: a constraint is too strict"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param("name", "tiny\n", id="name"),
        pytest.param("training.env", {"X\n": "1"}, id="env name"),
        pytest.param("schedule", {"expression": "rate(1 day)\n"}, id="schedule"),
    ],
)
def test_a_final_newline_is_refused_as_ecma_262_reads_the_pattern(path: str, value: Any) -> None:
    # Given a value that matches its pattern but for a final newline
    manifest = manifest_with(path, value)
    # When the model and an ECMA-262 reading of the schema judge it (Python's `re`, which jsonschema uses,
    # lets `$` match before a final newline; JSON Schema means ECMA-262, whose `$` does not)
    by_schema, by_model = RUST_VALIDATOR.is_valid(manifest), model_accepts(manifest)
    # Then both refuse it
    assert not by_model
    assert not by_schema


def test_overlapping_destinations_are_the_models_rule_only() -> None:
    # Given two inputs whose destinations nest: a relation between items, which JSON Schema cannot state
    inputs = [{"source": "s3://bkt/a", "destination": "a"}, {"source": "s3://bkt/b", "destination": "./a/b"}]
    manifest = manifest_with("data.inputs", inputs)
    # When the published schema and the model judge it
    by_schema, by_model = schema_accepts(manifest), model_accepts(manifest)
    # Then the schema allows it and the model refuses it (the schemathesis test tolerates exactly this 422)
    assert by_schema
    assert not by_model


def test_a_pattern_keeps_the_models_clearer_message() -> None:
    # Given a manifest whose name breaks the pattern the schema states
    manifest = manifest_with("name", "Bad Name")
    # When the model validates it
    with pytest.raises(ValidationError) as raised:
        JobManifest.model_validate(manifest)
    # Then the message says what a name is, in words, rather than quoting the regex
    message = raised.value.errors()[0]["msg"]
    assert "lower-case letters, digits and '-'" in message
    assert "pattern" not in message


class _Stripped(StrictModel):
    text: str


def test_the_schema_s_white_space_is_what_the_model_strips() -> None:
    # Given every character up to U+3000 (past it, no dialect has white space but ECMA-262's U+FEFF), on both
    # sides of a word
    characters = [chr(c) for c in range(0x3001)] + ["\ufeff"]
    # When the manifest's models strip it (StrictModel's str_strip_whitespace), and the schema's class reads it
    stripped = {c for c in characters if _Stripped(text=f"{c}x{c}").text == "x"}
    white = {c for c in characters if re.fullmatch(f"[{WHITE_SPACE}]", c)}
    # Then they are the same characters
    assert stripped == white
