"""Functions, their roles, the state machine, the rules, the alarms and the outputs of the synthesized stack."""

from __future__ import annotations

import json
import re
from pathlib import Path

from infra.constructs.control_plane.functions import POWERTOOLS_LAYER
from infra.constructs.monitoring import GPU_MEMORY, GPU_UTILIZATION
from infra.stack import output_key
from spotrun.aws.settings import Settings
from spotrun.shape import SHAPE, STATE_MACHINE_FILE, rule_pattern
from tests.infra.conftest import Synthesized, get_att, ref
from tests.infra.test_storage_and_network import actions_of, statements_of


def _version(runtime: str) -> tuple[int, int]:
    major, minor = re.fullmatch(r"python(\d+)\.(\d+)", runtime).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def _statements_with(synthesized: Synthesized, function: str, action: str) -> list[dict]:
    role = synthesized.properties(synthesized.marked("function")[function])["Role"]["Fn::GetAtt"][0]
    return [s for s in statements_of(synthesized, role) if action in actions_of(s)]


def test_every_function_is_declared_python_312_plus_with_powertools_and_own_role(
    synthesized: Synthesized,
) -> None:
    # Given the shape's functions in the template
    functions = synthesized.marked("function")

    # Then each has its declaration's handler, timeout and memory, a recent runtime, the layer, tracing, a role
    roles = set()
    for spec in SHAPE.functions:
        props = synthesized.properties(functions[spec.name])
        assert props["Handler"] == spec.handler
        assert props["Timeout"] == spec.timeout_seconds
        assert props["MemorySize"] == spec.memory_mb
        assert _version(props["Runtime"]) >= (3, 12)
        assert POWERTOOLS_LAYER in json.dumps(props["Layers"])
        assert props["TracingConfig"] == {"Mode": "Active"}
        roles.add(props["Role"]["Fn::GetAtt"][0])
    assert len(roles) == len(SHAPE.functions)


def test_each_function_gets_exactly_the_settings_it_declares(synthesized: Synthesized) -> None:
    # Given each function's environment
    functions = synthesized.marked("function")

    # Then its SPOTRUN_ variables are the settings it declares, nothing more
    for spec in SHAPE.functions:
        variables = synthesized.properties(functions[spec.name])["Environment"]["Variables"]
        spotrun_vars = {key for key in variables if key.startswith("SPOTRUN_")}
        assert spotrun_vars == {f"SPOTRUN_{name.upper()}" for name in spec.settings}
        assert not any("TOKEN" in key or "SECRET" in key for key in variables)


def test_function_grants_are_scoped_by_tag_document_and_template(synthesized: Synthesized) -> None:
    # Given the statements of the functions that touch instances
    machines = list(synthesized.resources("AWS::StepFunctions::StateMachine"))

    # Then terminations need the job tag, commands need the tag or the document, launches the template
    for function in ("release", "instance_ready"):
        (terminate,) = _statements_with(synthesized, function, "ec2:TerminateInstances")
        assert terminate["Condition"] == {"StringLike": {"aws:ResourceTag/spotrun:job-id": "*"}}
    commands = _statements_with(synthesized, "agent_step", "ssm:SendCommand")
    assert any("document/spotrun-agent-run" in json.dumps(s["Resource"]) for s in commands)
    assert any(
        s.get("Condition") == {"StringLike": {"ssm:resourceTag/spotrun:job-id": "*"}} for s in commands
    )
    assert _statements_with(synthesized, "instance_ready", "ssm:DescribeInstanceInformation")
    # (launches: tests/infra/test_launch_permissions.py)
    runs = _statements_with(synthesized, "acquire", "ec2:RunInstances")
    assert runs
    assert all("ec2:LaunchTemplate" in run["Condition"]["ArnLike"] for run in runs)
    (start,) = _statements_with(synthesized, "submit", "states:StartExecution")
    assert start["Resource"] == ref(machines[0])
    assert not _statements_with(synthesized, "finalize", "ec2:TerminateInstances")


def test_only_the_workflow_and_the_event_functions_may_launch_instances(synthesized: Synthesized) -> None:
    # Given every function's statements
    launching = {
        name
        for name in synthesized.marked("function")
        if _statements_with(synthesized, name, "ec2:CreateFleet")
        or _statements_with(synthesized, name, "ec2:RunInstances")
    }
    # Then launches come from the workflow's acquire, the warning's standby and the deadline's return to spot:
    # never from the API (the heartbeat that wants spot back asks deadline_return on the bus instead)
    assert launching == {"acquire", "ec2_events", "deadline_return"}


def test_state_machine_references_only_functions_of_this_stack(synthesized: Synthesized) -> None:
    # Given the state machine and the functions of the template
    ((machine_id, machine),) = synthesized.resources("AWS::StepFunctions::StateMachine").items()
    props = machine["Properties"]
    functions = synthesized.resources("AWS::Lambda::Function")
    definition = json.loads(props["DefinitionString"])
    substitutions = props["DefinitionSubstitutions"]

    # Then every placeholder is substituted by the ARN of a function in the stack, as the shape says
    placeholders = set(re.findall(r"\$\{(\w+)\}", props["DefinitionString"]))
    assert placeholders <= set(substitutions)
    marked = synthesized.marked("function")
    for placeholder, function in SHAPE.state_machine_functions.items():
        assert substitutions[placeholder] == get_att(marked[function])
    assert all(value["Fn::GetAtt"][0] in functions for value in substitutions.values())
    # ...every task is a Lambda invocation, and the definition is the repository's file
    tasks = [state for state in definition["States"].values() if state["Type"] == "Task"]
    assert tasks
    assert {task["Resource"] for task in tasks} <= {
        "arn:aws:states:::lambda:invoke",
        "arn:aws:states:::lambda:invoke.waitForTaskToken",
    }
    assert definition == json.loads(Path(STATE_MACHINE_FILE).read_text())
    # ...and the workflow's role invokes exactly those functions
    role_id = props["RoleArn"]["Fn::GetAtt"][0]
    invokes = [s for s in statements_of(synthesized, role_id) if s["Action"] == "lambda:InvokeFunction"]
    assert {r["Fn::GetAtt"][0] for s in invokes for r in s["Resource"]} == {
        marked[name] for name in SHAPE.state_machine_functions.values()
    }
    assert machine_id


def test_state_machine_logs_everything_but_execution_data_and_traces(synthesized: Synthesized) -> None:
    # Given the state machine
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]

    # Then logging is ALL without data (task tokens stay out of logs) and X-Ray is on
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    assert props["TracingConfiguration"] == {"Enabled": True}


def test_rules_match_the_shape_and_target_their_function(synthesized: Synthesized) -> None:
    # Given the shape's rules and resources in the template
    rules, functions, buckets, buses = (
        synthesized.marked(kind) for kind in ("rule", "function", "bucket", "bus")
    )
    permissions = synthesized.resources("AWS::Lambda::Permission").values()

    # Then each pattern is the shape's (with the real bucket), on its bus (the default one, or spotrun's it
    # names), and the target function may be invoked by it
    for spec in SHAPE.rules:
        props = synthesized.properties(rules[spec.name])
        expected = rule_pattern(spec, {name: ref(logical) for name, logical in buckets.items()})  # type: ignore[misc]
        assert props["EventPattern"] == expected
        assert props.get("EventBusName") == (None if spec.bus is None else ref(buses[spec.bus])), spec.name
        assert [target["Arn"] for target in props["Targets"]] == [get_att(functions[spec.target_function])]
        assert any(
            p["Properties"]["SourceArn"] == get_att(rules[spec.name])
            and p["Properties"]["Principal"] == "events.amazonaws.com"
            for p in permissions
        )


def test_alarms_cover_failures_stuck_executions_and_gpus_and_notify_the_topic(
    synthesized: Synthesized,
) -> None:
    # Given the alarms and the topic
    alarms = synthesized.resources("AWS::CloudWatch::Alarm").values()
    ((topic_id, topic),) = synthesized.resources("AWS::SNS::Topic").items()
    text = json.dumps(list(alarms))

    # Then the job, workflow and GPU metrics are watched, and every alarm notifies the encrypted topic
    assert "ExecutionsFailed" in text
    assert "WorkflowTaskTimeouts" in text
    assert f"MIN({GPU_UTILIZATION})" in text
    assert f"MAX({GPU_MEMORY})" in text
    assert all(alarm["Properties"]["AlarmActions"] == [ref(topic_id)] for alarm in alarms)
    assert "KmsMasterKeyId" in topic["Properties"]
    (policy,) = synthesized.resources("AWS::SNS::TopicPolicy").values()
    assert "aws:SecureTransport" in json.dumps(policy["Properties"]["PolicyDocument"])
    assert synthesized.resources("AWS::CloudWatch::Dashboard")


def test_outputs_carry_every_setting_the_cli_needs(synthesized: Synthesized) -> None:
    # Given the stack's outputs
    outputs = synthesized.template["Outputs"]

    # Then every Settings field is there under its output key, plus the alarm topic and dashboard
    for field in Settings.model_fields:
        assert output_key(field) in outputs
    assert {"AlarmTopicArn", "DashboardName"} <= set(outputs)
    assert outputs["AgentDocumentName"]["Value"] == SHAPE.agent_document_name
