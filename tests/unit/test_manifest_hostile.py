"""Hostile and unusual manifest text: every input ends as a manifest or a ManifestError naming the problem, within
bounds on depth, alias expansion and size (asserted by those limits and by memory, never by timing)."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from spotrun.model.manifest import yaml_text
from spotrun.model.manifest.json_text import MAX_DEPTH
from spotrun.model.manifest.parse import MAX_ERRORS, MAX_MANIFEST_BYTES, ManifestError, parse_manifest_text
from spotrun.model.manifest.yaml_text import MAX_EXPANDED_SIZE

HEAD = "name: tiny\ntraining: {command: [python, train.py]}\n"


def refusal(text: str | bytes) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(text)
    return caught.value.errors


def test_nesting_past_the_depth_limit_is_refused_with_its_line():
    # Given a YAML value nested a little deeper than the limit (far from Python's recursion limit)
    text = HEAD + "tags: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    # When it is read, Then it is refused for its depth, at line 3
    [line] = refusal(text)
    assert f"nested deeper than {MAX_DEPTH} levels at line 3" in line


def test_nesting_of_thousands_of_levels_is_refused_without_a_recursion_error():
    # Given YAML and JSON nested 50,000 levels deep (PyYAML's composer and json recurse per level)
    yaml_text = HEAD + "tags: " + "[" * 50_000 + "]" * 50_000
    json_text = '{"name": "tiny", "tags": ' + "[" * 50_000 + "]" * 50_000 + "}"
    # When they are read, Then both end as a refusal naming the depth
    for text in (yaml_text, json_text):
        [line] = refusal(text)
        assert f"nested deeper than {MAX_DEPTH} levels" in line


def test_json_nested_past_the_limit_but_within_json_recursion_is_refused():
    # Given JSON 100 levels deep: json.loads reads it, spotrun must still refuse it
    text = json.dumps({"name": "tiny", "tags": json.loads("[" * 100 + "]" * 100)})
    # When / Then
    [line] = refusal(text)
    assert f"nested deeper than {MAX_DEPTH} levels" in line


def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 "lol"']
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return HEAD + "tags:\n" + "".join(f"  {line}\n" for line in lines)


def test_an_alias_bomb_is_refused_before_it_is_expanded_in_bounded_memory(monkeypatch):
    # Given a 1 KB document whose aliases expand to 10**9 scalars
    text = billion_laughs()
    constructed = []
    monkeypatch.setattr(
        yaml_text._BoundedLoader,
        "construct_document",
        lambda self, node: constructed.append(node),
    )
    # When it is read, with memory traced
    tracemalloc.start()
    try:
        [line] = refusal(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then it is refused for its expansion, nothing is constructed and memory stays small
    assert f"expands through its aliases to more than {MAX_EXPANDED_SIZE} characters" in line
    assert constructed == []
    assert peak < 20 * 1024 * 1024


def test_a_merge_key_bomb_is_refused_by_the_same_bound():
    # Given merge keys that multiply a mapping's keys at each level
    lines = ["m0: &m0 {k0: v}"]
    for level in range(1, 8):
        merged = ", ".join(f"*m{level - 1}" for _ in range(10))
        lines.append(f"m{level}: &m{level} {{<<: [{merged}], k{level}: v}}")
    text = HEAD + "tags:\n" + "".join(f"  {line}\n" for line in lines)
    # When / Then
    [line] = refusal(text)
    assert "expands through its aliases" in line


def test_a_recursive_alias_is_refused():
    [line] = refusal(HEAD + "tags: &loop {a: *loop}\n")
    assert "an alias refers to itself" in line


def test_aliases_within_the_bound_are_read_as_yaml_users_expect():
    # Given a code prefix given once and reused through an alias
    text = HEAD.replace("{command", "{code: &code s3://bkt/code/, command") + (
        "data:\n  inputs:\n    - {source: *code, destination: code-copy}\n"
    )
    # When / Then
    manifest = parse_manifest_text(text)
    assert manifest.data.inputs[0].source == manifest.training.code == "s3://bkt/code/"


def test_merge_keys_are_accepted_and_own_keys_override_merged_ones():
    # Given two inputs sharing their source through a merge key, the second overriding a merged key
    text = HEAD + (
        "data:\n  inputs:\n"
        "    - &first {source: s3://bkt/corpus/, destination: a}\n"
        "    - {<<: *first, destination: b}\n"
    )
    # When it is read
    manifest = parse_manifest_text(text)
    # Then the merge brought the source in, and the own key won
    assert [(i.source, i.destination) for i in manifest.data.inputs] == [
        ("s3://bkt/corpus/", "a"),
        ("s3://bkt/corpus/", "b"),
    ]


def test_a_key_given_twice_is_still_refused_beside_merge_keys():
    [line] = refusal(HEAD + "tags: {<<: {a: x}, team: a, team: b}\n")
    assert "the key 'team' appears twice" in line


def test_a_document_past_the_size_limit_is_refused_unread():
    # Given a manifest of 300 KiB (a long comment)
    text = HEAD + "#" + "x" * (300 * 1024) + "\n"
    # When / Then
    [line] = refusal(text)
    assert f"at most {MAX_MANIFEST_BYTES} bytes" in line


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("2026-02-31", "day is out of range"),  # a date YAML reads, Python cannot build
        ("2026-13-01", "month must be in 1..12"),
        ("1" * 5000, "cannot be read"),  # past Python's integer digit limit
        ("-" + "9" * 5000, "cannot be read"),
    ],
)
def test_values_yaml_cannot_construct_are_refused_with_their_line(value, fragment):
    # Given a value PyYAML resolves (timestamp, int) but cannot construct
    text = HEAD + f"tags: {{built: {value}}}\n"
    # When / Then it is refused at line 3
    [line] = refusal(text)
    assert fragment in line
    assert "at line 3" in line


@pytest.mark.parametrize("number", [".inf", "-.inf", ".nan", "1e999"])
def test_infinite_and_nan_numbers_are_refused_by_their_field(number):
    errors = refusal(HEAD + f"budget: {{max_usd: {number}}}\n")
    assert any(line.startswith("budget.max_usd:") for line in errors)


def test_an_unhashable_key_is_refused_not_a_type_error():
    errors = refusal(HEAD + "tags:\n  ? [a, b]\n  : x\n")
    assert "unhashable key" in errors[0]


def test_escaped_characters_outside_the_bmp_are_read_from_json_and_yaml():
    # Given the same emoji escaped as a UTF-16 surrogate pair in JSON and in a YAML double-quoted string
    as_json = (
        '{"name": "tiny", "training": {"command": ["python", "train.py"]}, "tags": {"e": "\\ud83d\\ude00"}}'
    )
    as_yaml = HEAD + 'tags: {e: "\\ud83d\\ude00"}\n'
    # When both are read, Then both hold the one character, as the REST API's json.loads reads it
    assert parse_manifest_text(as_json).tags == {"e": "\U0001f600"}
    assert parse_manifest_text(as_yaml).tags == {"e": "\U0001f600"}
    assert parse_manifest_text(as_json) == parse_manifest_text(json.dumps(json.loads(as_json)))


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "tiny", "training": {"command": ["python", "train.py"]}, "tags": {"e": "\\ud83d"}}',
        HEAD + 'tags: {e: "\\ud83d"}\n',
    ],
)
def test_an_unpaired_surrogate_is_refused_by_name(text):
    [line] = refusal(text)
    assert "unpaired UTF-16 surrogate" in line


def test_many_problems_are_cut_to_a_bounded_list_with_a_count():
    # Given 500 inputs each missing its destination, one of them with a 100 KB source
    inputs = [{"source": "s3://bkt/x/"} for _ in range(500)]
    inputs[0] = {"source": "s" * 100_000, "destination": "a"}
    text = json.dumps({"name": "tiny", "training": {"command": ["python"]}, "data": {"inputs": inputs}})
    # When it is read
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(text)
    # Then the first MAX_ERRORS lines are kept, each short, and a last line counts the rest
    errors = caught.value.errors
    assert caught.value.count == 500
    assert len(errors) == MAX_ERRORS + 1
    assert errors[-1] == f"... and {500 - MAX_ERRORS} more problem(s)"
    assert max(len(line) for line in errors) <= 300
    assert errors[0].startswith("data.inputs[0].source:")


def test_a_json_manifest_means_what_the_rest_api_reads():
    # Given JSON whose number YAML 1.1 would read as the text "1e-3" but JSON (and the API) as 0.001
    text = '{"name": "tiny", "training": {"command": ["python"], "env": {"LR": 1e-3}}}'
    # When the S3 path reads it, Then it holds what the API's json.loads gives
    assert parse_manifest_text(text).training.env == {"LR": "0.001"}
    assert parse_manifest_text(text) == parse_manifest_text(json.dumps(json.loads(text)))


def test_aliases_that_nest_past_the_depth_limit_once_expanded_are_refused():
    # Given three anchors of 30 levels each, each nesting the previous one: no text is deeper than 31 levels,
    # the expanded document is 90 deep
    chain = ["&l0 " + "[" * 30 + "x" + "]" * 30]
    for level in (1, 2):
        chain.append(f"&l{level} " + "[" * 30 + f"*l{level - 1}" + "]" * 30)
    text = HEAD + "tags: [" + ", ".join(chain) + "]\n"
    # When / Then
    [line] = refusal(text)
    assert f"nested deeper than {MAX_DEPTH} levels once aliases are expanded" in line


def test_a_problem_under_a_very_long_key_keeps_its_message():
    # Given a tag whose key is 5,000 characters long and whose value is not text
    text = json.dumps({"name": "tiny", "training": {"command": ["python"]}, "tags": {"k" * 5000: ["x"]}})
    # When / Then the line is short, and the problem survives the cut location
    [line] = refusal(text)
    assert len(line) <= 300
    assert line.endswith(": Input should be a valid string")
