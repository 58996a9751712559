"""A command or environment Linux's execve(2) would refuse is refused when the manifest is submitted.

https://man7.org/linux/man-pages/man2/execve.2.html ("Limits on size of arguments and environment"):
one string at most MAX_ARG_STRLEN (131,072 bytes with its NUL), all together at most a quarter of the stack.
"""

from __future__ import annotations

from typing import Any

import pytest

from spotrun.model.manifest.exec_limits import (
    AGENT_ENVIRONMENT_RESERVE,
    ARG_MAX_TOTAL,
    MAX_ARG_STRLEN,
    POINTER_BYTES,
)
from spotrun.model.manifest.parse import ManifestError, parse_manifest_document, parse_manifest_text


def _manifest(
    command: list[str], env: dict[str, str] | None = None, setup: list[list[str]] | None = None
) -> Any:
    training: dict[str, Any] = {"command": command, "env": env or {}}
    if setup is not None:
        training["setup"] = setup
    return {"name": "limits", "training": training}


def _errors(document: Any) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest_document(document)
    return caught.value.errors


def test_an_argument_fits_up_to_max_arg_strlen_with_its_nul() -> None:
    # Given arguments of 131,071 bytes (the NUL makes 131,072) and of one byte more
    longest = "a" * (MAX_ARG_STRLEN - 1)

    # When each is submitted
    accepted = parse_manifest_document(_manifest(["python", longest]))
    errors = _errors(_manifest(["python", longest + "a"]))

    # Then the first passes and the second is refused, naming the argument and the kernel's limit
    assert accepted.training.command[1] == longest
    assert len(errors) == 1
    assert errors[0].startswith("training: command[1]: 131,072 bytes")
    assert "MAX_ARG_STRLEN" in errors[0]


def test_the_limit_counts_bytes_not_characters() -> None:
    # Given 65,536 two-byte characters: 131,072 bytes of UTF-8
    errors = _errors(_manifest(["python", "é" * 65_536]))

    # Then it is refused as over the limit
    assert "command[1]: 131,072 bytes" in errors[0]


def test_an_environment_entry_counts_its_name_and_equals_sign() -> None:
    # Given NAME=value strings of exactly 131,071 bytes and of one more
    fits = "v" * (MAX_ARG_STRLEN - 1 - len("BIG="))

    # When each is submitted (as text, through the same parser the API and the S3 drop use)
    accepted = parse_manifest_document(_manifest(["python", "t.py"], {"BIG": fits}))
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(f"name: limits\ntraining: {{command: [python, t.py], env: {{BIG: {fits}v}}}}\n")

    # Then the first passes and the second is refused at training.env, naming the variable
    assert accepted.training.env["BIG"] == fits
    assert caught.value.errors[0].startswith("training.env: BIG: 131,072 bytes")


def test_an_argument_is_measured_after_expansion() -> None:
    # Given a small manifest whose argument expands to twice a 70,000-byte value of training.env
    document = _manifest(["python", "--data=${BIG}${BIG}"], {"BIG": "x" * 70_000})

    # When it is submitted
    errors = _errors(document)

    # Then the expanded argument is refused (the agent would have built it on the instance)
    assert errors[0].startswith("training: command[1]: 140,007 bytes")
    assert "after ${NAME} expansion" in errors[0]


def test_a_setup_command_is_held_to_the_same_limit() -> None:
    # Given a setup command with an oversized argument
    errors = _errors(_manifest(["python"], setup=[["pip", "install", "p" * MAX_ARG_STRLEN]]))

    # Then it is refused, naming it
    assert errors[0].startswith("training: setup[0][2]:")


def test_the_total_of_arguments_and_environment_is_bounded() -> None:
    # Given an argument of 100,000 bytes repeated through ${BIG}: each string fits, their sum may not
    value = "x" * 100_000
    per_reference = 100_001 + POINTER_BYTES
    env_entry = len("BIG=") + 100_001 + POINTER_BYTES
    budget = ARG_MAX_TOTAL - AGENT_ENVIRONMENT_RESERVE
    most = (budget - env_entry - (len("python") + 1 + POINTER_BYTES)) // per_reference

    # When the command holds as many references as fit, and one more
    accepted = parse_manifest_document(_manifest(["python", *["${BIG}"] * most], {"BIG": value}))
    errors = _errors(_manifest(["python", *["${BIG}"] * (most + 1)], {"BIG": value}))

    # Then the first passes and the second is refused with the total and the limit
    assert len(accepted.training.command) == most + 1
    assert errors[0].startswith("training: command with training.env:")
    assert f"{ARG_MAX_TOTAL:,}" in errors[0]
