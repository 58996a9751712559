"""The CDK app, synthesized once per session (synth takes seconds), and helpers to read its template."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Importing infra.app points jsii's package cache into the project before aws_cdk starts its runtime.
from infra.app import build_app
from infra.shape_tags import METADATA_KEY


@dataclass
class Synthesized:
    """A synthesized cloud assembly and the spotrun stack's template."""

    outdir: Path
    stack_name: str
    template: dict[str, Any]

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        """Logical id -> resource, for every resource of ``resource_type``."""
        return {
            key: value for key, value in self.template["Resources"].items() if value["Type"] == resource_type
        }

    def marked(self, kind: str) -> dict[str, str]:
        """Shape name -> logical id, for the resources marked as the shape's ``kind``."""
        found = {}
        for logical_id, resource in self.template["Resources"].items():
            mark = resource.get("Metadata", {}).get(METADATA_KEY)
            if mark and mark["kind"] == kind:
                found[mark["name"]] = logical_id
        return found

    def properties(self, logical_id: str) -> dict[str, Any]:
        """Properties of one resource."""
        return dict(self.template["Resources"][logical_id]["Properties"])

    def launch_template(self, *, efa: bool = False) -> tuple[str, dict[str, Any]]:
        """Logical id and resource of the plain launch template, or of the EFA one (it names network interfaces).

        Fails unless there is exactly one of each.
        """
        templates = self.resources("AWS::EC2::LaunchTemplate")
        (found,) = [
            (key, value)
            for key, value in templates.items()
            if ("NetworkInterfaces" in value["Properties"]["LaunchTemplateData"]) is efa
        ]
        assert len(templates) == 2, sorted(templates)
        return found


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build_app(outdir=str(outdir))
    # cdk-nag runs as a validation plugin inside synth: an unacknowledged finding raises here.
    assembly = app.synth()
    template = assembly.get_stack_by_name(stack.stack_name).template
    return Synthesized(outdir=outdir, stack_name=stack.stack_name, template=json.loads(json.dumps(template)))


def ref(logical_id: str) -> dict[str, str]:
    """CloudFormation ``Ref`` to a resource."""
    return {"Ref": logical_id}


def get_att(logical_id: str, attribute: str = "Arn") -> dict[str, list[str]]:
    """CloudFormation ``Fn::GetAtt`` of a resource."""
    return {"Fn::GetAtt": [logical_id, attribute]}
