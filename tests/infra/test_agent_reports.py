"""The agent's reporting path in the template: the instance role reaches one API route, the API answers tasks."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.conftest import Synthesized, ref
from tests.infra.test_storage_and_network import actions_of, statements_of

REPORT_ACTIONS = {"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"}


def instance_role(synthesized: Synthesized) -> str:
    ec2 = {"Service": "ec2.amazonaws.com"}
    (role_id,) = [
        key
        for key, role in synthesized.resources("AWS::IAM::Role").items()
        if role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == ec2
    ]
    return role_id


def function_role(synthesized: Synthesized, function: str) -> str:
    return str(synthesized.properties(synthesized.marked("function")[function])["Role"]["Fn::GetAtt"][0])


def joined(value: Any) -> str:
    """A Fn::Join as text, each reference written as <logical id>."""
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(joined(part) for part in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    return str(value)


def test_the_instance_role_has_no_workflow_action_and_invokes_only_the_agent_route(
    synthesized: Synthesized,
) -> None:
    # Given every statement of the instances' role
    statements = statements_of(synthesized, instance_role(synthesized))
    (api_id,) = synthesized.resources("AWS::ApiGateway::RestApi")

    # Then no Step Functions action at all (the instance holds no token and could use none)
    assert not [a for s in statements for a in actions_of(s) if a.startswith("states:")]
    # and execute-api:Invoke on exactly the agent's two routes of this API's stage, nothing of the user routes
    invokes = [s for s in statements if any(a.startswith("execute-api:") for a in actions_of(s))]
    assert len(invokes) == 1
    (invoke,) = invokes
    assert actions_of(invoke) == ["execute-api:Invoke"]
    assert invoke["Effect"] == "Allow"
    resources = [joined(resource) for resource in invoke["Resource"]]
    assert len(resources) == 2
    assert resources[0].endswith(f":<{api_id}>/v1/POST/agent/reports"), resources
    assert resources[1].endswith(f":<{api_id}>/v1/POST/agent/credentials"), resources
    assert not [resource for resource in resources if "*" in resource]


def test_the_agent_api_function_answers_tasks_of_the_state_machine_only(synthesized: Synthesized) -> None:
    # Given the agents' API function's statements
    statements = statements_of(synthesized, function_role(synthesized, "agent_api"))
    (machine_id,) = synthesized.resources("AWS::StepFunctions::StateMachine")

    # Then every task-answering action is on the job state machine, and all three are there
    answering = [s for s in statements if REPORT_ACTIONS & set(actions_of(s))]
    assert answering
    assert all(s["Resource"] == ref(machine_id) for s in answering)
    assert {a for s in answering for a in actions_of(s)} >= REPORT_ACTIONS


def test_the_users_api_function_holds_none_of_the_agents_powers(synthesized: Synthesized) -> None:
    # Given the statements of the function that serves the users' routes
    statements = statements_of(synthesized, function_role(synthesized, "api"))
    actions = {a for s in statements for a in actions_of(s)}

    # Then it may answer no workflow task, assume no role and write no agent command (the training log streams:
    # tests/infra/test_live_logs_infra.py)
    assert actions & (REPORT_ACTIONS | {"sts:AssumeRole"}) == set()
    writes = [s for s in statements if "s3:PutObject" in actions_of(s)]
    assert not [s for s in writes if "/agent/" in json.dumps(s["Resource"])]


def test_the_agent_step_writes_the_routes_url_and_the_api_knows_the_instance_role(
    synthesized: Synthesized,
) -> None:
    # Given the functions' environments
    functions = synthesized.marked("function")

    def environment(function: str) -> dict[str, Any]:
        return dict(synthesized.properties(functions[function])["Environment"]["Variables"])

    (api_id,) = synthesized.resources("AWS::ApiGateway::RestApi")
    # Then agent_step's report URL is the API's agent route on its stage
    url = joined(environment("agent_step")["SPOTRUN_AGENT_REPORT_URL"])
    assert url.startswith(f"https://<{api_id}>.execute-api.")
    assert url.endswith("/v1/agent/reports")
    # and the agents' API function compares callers with the instances' role; the users' knows neither
    assert environment("agent_api")["SPOTRUN_INSTANCE_ROLE_NAME"] == ref(instance_role(synthesized))
    assert "SPOTRUN_INSTANCE_ROLE_NAME" not in environment("api")
    assert "SPOTRUN_AGENT_REPORT_URL" not in json.dumps([environment("api"), environment("agent_api")])
