"""The REST API in the synthesized stack: IAM on every method, proxied to the api function, logged, throttled."""

from __future__ import annotations

import json
from typing import Any

from infra.constructs.control_plane.api import THROTTLE_BURST, THROTTLE_RATE
from spotrun.model.agent_protocol.api_paths import AGENT_ROUTES_PREFIX
from spotrun.shape import SHAPE
from tests.infra.conftest import Synthesized, get_att
from tests.infra.test_storage_and_network import actions_of, statements_of


def test_every_api_method_requires_iam_authorization(synthesized: Synthesized) -> None:
    # Given every method of every API resource (the root's ANY and the {proxy+} catch-all included)
    methods = synthesized.resources("AWS::ApiGateway::Method")

    # Then there are some, and each one is behind AWS_IAM, with no API-key or authorizer bypass
    assert len(methods) >= 2
    for logical_id, method in methods.items():
        props = method["Properties"]
        assert props["AuthorizationType"] == "AWS_IAM", logical_id
        assert not props.get("ApiKeyRequired", False), logical_id
        assert "AuthorizerId" not in props, logical_id
    assert {m["Properties"]["HttpMethod"] for m in methods.values()} == {"ANY"}


def test_every_method_proxies_to_the_function_of_its_path(synthesized: Synthesized) -> None:
    # Given the functions, the API's resources by id (their paths) and the methods' integrations
    functions = synthesized.marked("function")
    resources = synthesized.resources("AWS::ApiGateway::Resource")

    def path_of(resource_id: Any) -> str:
        if "Ref" not in resource_id:  # the root: {"Fn::GetAtt": [api, "RootResourceId"]}
            return ""
        props = resources[resource_id["Ref"]]["Properties"]
        return f"{path_of(props['ParentId'])}/{props['PathPart']}"

    served: dict[str, str] = {}
    for method in synthesized.resources("AWS::ApiGateway::Method").values():
        integration = method["Properties"]["Integration"]
        path = path_of(method["Properties"]["ResourceId"]) or "/"
        # Then each is a Lambda proxy integration
        assert integration["Type"] == "AWS_PROXY"
        [function] = [
            name
            for name, logical in functions.items()
            if json.dumps(get_att(logical)) in json.dumps(integration["Uri"])
        ]
        served[path] = function

    # and the agents' subtree, and only it, goes to the agents' function, every other path to the users' API
    assert served == {
        "/": "api",
        "/{proxy+}": "api",
        AGENT_ROUTES_PREFIX: "agent_api",
        f"{AGENT_ROUTES_PREFIX}/{{proxy+}}": "agent_api",
    }
    assert {SHAPE.api_function_for(path.replace("{proxy+}", "x")) for path in served} == {"api", "agent_api"}
    assert all(SHAPE.api_function_for(path.replace("{proxy+}", "x")) == name for path, name in served.items())


def test_stage_logs_access_and_errors_and_is_throttled(synthesized: Synthesized) -> None:
    # Given the API's one stage
    [stage] = synthesized.resources("AWS::ApiGateway::Stage").values()
    props = stage["Properties"]

    # Then access logs go to a log group, execution logs record errors without bodies, and it is throttled
    assert "DestinationArn" in props["AccessLogSetting"]
    assert "$context.identity.caller" in props["AccessLogSetting"]["Format"]
    [settings] = props["MethodSettings"]
    assert settings["LoggingLevel"] == "ERROR"
    assert settings["DataTraceEnabled"] is False
    assert settings["ThrottlingRateLimit"] == THROTTLE_RATE
    assert settings["ThrottlingBurstLimit"] == THROTTLE_BURST
    assert props["TracingEnabled"] is True


def test_api_url_is_a_stack_output(synthesized: Synthesized) -> None:
    assert "execute-api" in json.dumps(synthesized.template["Outputs"]["ApiUrl"]["Value"])


def test_api_function_may_stop_only_the_job_workflows_executions(synthesized: Synthesized) -> None:
    # Given the api function's role
    role = synthesized.properties(synthesized.marked("function")["api"])["Role"]["Fn::GetAtt"][0]
    statements = statements_of(synthesized, role)

    # Then StopExecution is granted on the job state machine's executions only, and termination on tag
    [stop] = [s for s in statements if "states:StopExecution" in actions_of(s)]
    [machine] = synthesized.resources("AWS::StepFunctions::StateMachine")
    assert json.dumps(get_att(machine, "Name")) in json.dumps(stop["Resource"])
    assert ":execution:" in json.dumps(stop["Resource"])
    [terminate] = [s for s in statements if "ec2:TerminateInstances" in actions_of(s)]
    assert "aws:ResourceTag/spotrun:job-id" in json.dumps(terminate["Condition"])
    [restore] = [s for s in statements if "s3:RestoreObject" in actions_of(s)]
    assert "s3:PutObject" not in actions_of(restore)
