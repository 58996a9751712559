"""The reference pages' generated parts: the manifest, the job record, the CLI, the events.

Each function returns Markdown read from the code at build time (the pydantic models, the typer app, the
deployment's shape); tools/docs/hooks.py puts it where a page says ``<!-- generated: NAME -->``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from schema_tables import cell, code, definition_section, reachable_classes, schema_sections

# The manifest's sections carry this id prefix; the job record's page links into them.
MANIFEST_PREFIX = "manifest"


def _manifest_schema() -> dict[str, Any]:
    from spotrun.model.manifest.parse import manifest_json_schema

    schema: dict[str, Any] = json.loads(manifest_json_schema())
    return schema


def manifest_fields() -> str:
    """The manifest's objects and fields, from ``spotrun.model.manifest.parse.manifest_json_schema``."""
    from spotrun.model.manifest.schema import JobManifest

    classes = reachable_classes([JobManifest])
    return schema_sections(_manifest_schema(), MANIFEST_PREFIX, classes, root_name="JobManifest")


def manifest_json() -> str:
    """The whole JSON Schema, as ``spotrun schema`` prints it, folded."""
    from spotrun.model.manifest.parse import manifest_json_schema

    body = "\n".join(f"    {line}" for line in manifest_json_schema().splitlines())
    return f'??? note "The JSON Schema (`spotrun schema`)"\n\n    ```json\n{body}\n    ```\n'


def job_record_fields() -> str:
    """The job record's objects and fields (``spotrun.model.job.record.Job``, as the API serializes it)."""
    from spotrun.model.job.record import Job

    schema = Job.model_json_schema(mode="serialization")
    manifest_defs = {*_manifest_schema().get("$defs", {}), "JobManifest"}
    external = {name: f"manifest.md#{MANIFEST_PREFIX}-{name.lower()}" for name in manifest_defs}
    return schema_sections(schema, "job", reachable_classes([Job]), external=external, root_name="Job")


def cli_commands() -> str:
    """Every command of ``spotrun`` with its help, as typer's own ``typer ... utils docs`` writes it."""
    import typer
    from typer.cli import get_docs_for_click

    from spotrun.cli.app import app

    command = typer.main.get_command(app)
    context = typer.Context(command)
    text = get_docs_for_click(obj=command, ctx=context, name="spotrun", title="Commands")
    # The page has its own title: typer's top heading becomes a section, its sections one level down.
    return (
        "\n".join("#" + line if line.startswith("#") else line for line in text.strip().splitlines()) + "\n"
    )


def event_rules() -> str:
    """The EventBridge rules of the deployment (``spotrun.shape.SHAPE.rules``): what each delivers, to whom."""
    from spotrun.shape import SHAPE

    lines = ["| rule | bus | matches | delivered to | handler |", "| --- | --- | --- | --- | --- |"]
    for rule in SHAPE.rules:
        pattern = json.dumps(rule.pattern, separators=(", ", ": "))
        bus = f"spotrun's `{rule.bus}`" if rule.bus else "default"
        if rule.source_bucket:
            bus += f" (the `{rule.source_bucket}` bucket's events)"
        handler = SHAPE.function(rule.target_function).handler
        lines.append(
            f"| `{rule.name}` | {bus} | {cell(rule.description)}<br>{code(pattern)} "
            f"| `{rule.target_function}` | `{handler}` |"
        )
    return "\n".join(lines) + "\n"


def bus_events() -> str:
    """The events spotrun puts on its own bus (``spotrun.model.job.bus_events``) with their details."""
    from spotrun.control.job_events import status_change_detail
    from spotrun.model.job import bus_events as events
    from spotrun.shape import SHAPE

    bus = SHAPE.buses[0]
    docs = (status_change_detail.__doc__ or "").split("Returns", 1)[-1].split("-------", 1)[-1]
    keys = " ".join(docs.split("\n", 2)[-1].split())
    lines = [
        f"The bus (the deployment's `{bus.logical_name}` bus, its name in the functions' `{bus.setting}` "
        f"setting): {bus.description} Every event's source is `{events.SOURCE}`.",
        "",
        "| detail-type | published by | detail |",
        "| --- | --- | --- |",
        f"| `{events.STATUS_CHANGE}` | the job store, after each write that changes a job's status "
        f"(`spotrun.control.job_events`) | {keys} |",
        f"| `{events.RETURN_TO_SPOT}` | the agents' API, at a deadline job's heartbeat | "
        f"[ReturnToSpot](#bus-returntospot) |",
        "",
    ]

    def link(name: str) -> str:
        return f"[{name}](#bus-{name.lower()})"

    schema = events.ReturnToSpot.model_json_schema()
    lines.append(definition_section("ReturnToSpot", schema, link, "bus", events.ReturnToSpot))
    return "\n".join(lines)


def aws_events() -> str:
    """The AWS events' models the functions parse (``spotrun.aws.events``)."""
    from spotrun.aws import events

    classes = {
        name: value
        for name, value in vars(events).items()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == events.__name__
    }

    from spotrun.model.job import bus_events

    def link(target: str) -> str:
        if target in classes:
            return f"[{target}](#aws-{target.lower()})"
        # spotrun's own event details are documented with its bus, above.
        return f"[{target}](#bus-{target.lower()})" if hasattr(bus_events, target) else f"`{target}`"

    sections = [
        definition_section(name, cls.model_json_schema(), link, "aws", cls) for name, cls in classes.items()
    ]
    return "\n".join(sections)
