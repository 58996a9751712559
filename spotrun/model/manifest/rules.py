"""The rules behind the manifest's fields: patterns, checks and constrained types, shared by its models.

Each rule is stated once, both as a check with a message naming the field and as a JSON Schema constraint, so
that the schema published by ``spotrun schema`` and the validation agree.
:mod:`spotrun.model.manifest.schema` builds the models from these.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from spotrun.model.base import DeferredModel

# Each rule below is both checked here (with a message naming the field) and stated in the JSON Schema (a
# `pattern`), from the same text, so that a manifest valid under the published schema is accepted. The patterns
# are written for both dialects: no lookaround (hypothesis-jsonschema generates from them), `[0-9]` rather than
# `\d` and `[^\n]` rather than `.` (whose meanings differ between Python and ECMA-262), and they are matched
# with `fullmatch` here because Python's `$` also matches before a final newline, ECMA's does not. `\w` in the
# tag-key pattern is Unicode to Python and ASCII to ECMA: a tool of the latter kind is only stricter.
# Each is kept as its text and matched with `re.fullmatch(PATTERN, value)` (or `re.match`): `re` compiles a
# pattern at its first use and caches it, so importing the manifest's models compiles none (a cold start's cost).
_BUCKET: Final = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
# The schema's pattern has no named groups (ECMA-262 spells them differently); splitting needs them.
_S3_URI: Final = rf"^s3://{_BUCKET}(?:/[^\n]*)?$"
_S3_PARTS: Final = rf"^s3://(?P<bucket>{_BUCKET})(?:/(?P<key>[^\n]*))?$"
NAME: Final = r"^[a-z0-9][a-z0-9\-]{0,47}$"
_CRON_PATTERN: Final = r"cron\((?:[0-9A-Za-z*?/,#\-]+ ){5}[0-9A-Za-z*?/,#\-]+\)"
# Scheduler wants a singular unit for 1 and a plural one otherwise; the two alternatives say so.
_RATE_PATTERN: Final = r"rate\((?:1 (?:minute|hour|day)|(?:[2-9]|[1-9][0-9]+) (?:minutes|hours|days))\)"
CRON: Final = rf"^{_CRON_PATTERN}$"
RATE: Final = r"^rate\((?P<value>[1-9][0-9]*) (?P<unit>minute|minutes|hour|hours|day|days)\)$"
SCHEDULE: Final = rf"^(?:{_CRON_PATTERN}|{_RATE_PATTERN})$"
TAG_KEY: Final = r"^[\w.:/=+\-@ ]{1,128}$"
# Reserved prefixes, any case: a pattern without lookahead cannot forbid them, a `not` beside it can.
RESERVED_TAG_KEY: Final = r"^(?:[Aa][Ww][Ss]|[Ss][Pp][Oo][Tt][Rr][Uu][Nn]):"
MAX_TAGS: Final = 40
MAX_TAG_VALUE: Final = 256
ENV_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"
RESERVED_ENV_NAME: Final = r"^SPOTRUN_"
INSTANCE_TYPE: Final = r"^[a-z][a-z0-9\-]*\.[a-z0-9]+$"
# A relative path: no leading '/', no '..' segment, no NUL (no file name holds one), not empty. Without
# lookahead, a segment other than '..' is '' or '.', or starts with another character, or is '.' then another
# character, or '..' and more.
_SEGMENT = r"(?:\.?|[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+)"
_FIRST_SEGMENT = r"(?:\.|[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+)"
_RELATIVE_PATH: Final = rf"^{_FIRST_SEGMENT}(?:/{_SEGMENT})*$"
# The white space str_strip_whitespace strips (pydantic-core trims Unicode's White_Space, as Rust's str::trim does:
# not \x1c-\x1f, which Python's str.strip() also removes), spelt out because the regex dialects disagree on \s:
# ECMA-262's (schemathesis, a browser) lacks \x85 and adds \ufeff. With \s, an argument of NEL and tabs passed
# the published schema's \S and was stripped to nothing by the model (schemathesis found it).
WHITE_SPACE = r"\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# One argument without a space once the white space around it is stripped (a one-argument command is no shell
# string).
ONE_WORD: Final = rf"^[{WHITE_SPACE}]*[^ ]*[{WHITE_SPACE}]*$"
CheckpointSignal = Literal["SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP"]

# A string checked against a pattern is taken as written: stripping it first would accept " name" (and refuse
# a path " /x" the pattern allows), so the schema would no longer say exactly what is accepted.
AS_WRITTEN = StringConstraints(strip_whitespace=False)


def _is_number(annotation: Any) -> bool:
    return any(arg in (int, float) for arg in (get_args(annotation) or (annotation,)))


def refuse_bool_or_text(value: Any) -> Any:
    """Refuse a boolean or a text where a number is due; pass anything else on to pydantic.

    pydantic's lax mode takes ``true`` for 1 and ``"5"`` for 5; a request means what it says. An integral float
    such as 60.0 stays an integer, as JSON Schema's "integer" counts it (so StrictInt, which refuses 60.0, would
    refuse what the published schema allows).
    """
    if isinstance(value, bool | str):
        raise ValueError(f"must be a number, not {'a boolean' if isinstance(value, bool) else 'a text'}")
    return value


# An integer as JSON Schema says it: 5 and 5.0, never true or "5" (the API's request bodies).
JsonInt = Annotated[int, BeforeValidator(refuse_bool_or_text)]
# A number as JSON Schema says it: 5 and 0.5, never true or "0.5".
JsonFloat = Annotated[float, BeforeValidator(refuse_bool_or_text)]


class StrictModel(DeferredModel):
    # NaN and infinity are no price, limit or count (and JSON cannot store them): refused like any bad number.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # A manifest's numbers are numbers (refuse_bool_or_text). (Booleans are StrictBool.)
        if info.field_name and _is_number(cls.model_fields[info.field_name].annotation):
            return refuse_bool_or_text(value)
        return value


def _check_s3_uri(value: str) -> str:
    if not re.fullmatch(_S3_URI, value):
        raise ValueError(f"must be an S3 URI like s3://bucket/prefix/, got {value!r}")
    return value


def _check_relative_path(value: str) -> str:
    if not re.fullmatch(_RELATIVE_PATH, value):
        raise ValueError(f"must be a relative path without '..' or NUL, got {value!r}")
    return value


def scalar_to_text(value: Any) -> Any:
    # YAML reads `OMP_NUM_THREADS: 4` as a number; an environment only holds text.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def split_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` into ``(bucket, key)``.

    Parameters
    ----------
    uri
        An S3 URI; the key may be empty.

    Returns
    -------
    tuple[str, str]
        The bucket name and the key (possibly ``""``).
    """
    match = re.fullmatch(_S3_PARTS, uri)
    if not match:
        raise ValueError(f"not an S3 URI: {uri!r}")
    return match["bucket"], match["key"] or ""


S3Uri = Annotated[
    str,
    AS_WRITTEN,
    AfterValidator(_check_s3_uri),
    WithJsonSchema({"type": "string", "pattern": _S3_URI}),
]
RelativePath = Annotated[
    str,
    AS_WRITTEN,
    AfterValidator(_check_relative_path),
    WithJsonSchema({"type": "string", "pattern": _RELATIVE_PATH}),
]
# An argument may have spaces around it (they are stripped) but must hold something else.
Argument = Annotated[str, StringConstraints(min_length=1, pattern=rf"[^{WHITE_SPACE}]")]


def _check_argv(value: list[str]) -> list[str]:
    # One argument holding a space (once stripped) is a shell string: nothing on the instance runs a shell.
    if len(value) == 1 and " " in value[0]:
        raise ValueError("must be an argv list such as ['python', 'train.py'], not one shell string")
    return value


# A command as an argv list (training.command, each of training.setup): _check_argv refuses one argument holding
# a space; the schema says the same, as two or more arguments or one that is white space around a word.
Argv = Annotated[
    list[Argument],
    Field(min_length=1, json_schema_extra={"anyOf": [{"minItems": 2}, {"items": {"pattern": ONE_WORD}}]}),
    AfterValidator(_check_argv),
]
InstanceType = Annotated[str, AS_WRITTEN, WithJsonSchema({"type": "string", "pattern": INSTANCE_TYPE})]
GpuName = Literal["t4", "a10g", "l4", "l40s", "v100", "a100", "h100", "h200"]
