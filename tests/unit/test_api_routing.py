"""Which function a request of the API reaches: the shape's routing, and the emulator's API Gateway following it."""

from __future__ import annotations

import io
import json
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from spotrun.local.api.gateway import ProxyApp
from spotrun.model.agent_protocol.api_paths import (
    AGENT_CREDENTIALS_PATH,
    AGENT_REPORTS_PATH,
    AGENT_ROUTES_PREFIX,
)
from spotrun.shape import SHAPE, DeploymentShape
from tests.sigv4 import SigningMiddleware

ROUTED = [
    ("/", "api"),
    ("/jobs", "api"),
    ("/jobs/j-1/logs", "api"),
    ("/agentx", "api"),  # a sibling whose name starts alike is not beneath the subtree
    (AGENT_ROUTES_PREFIX, "agent_api"),
    (AGENT_REPORTS_PATH, "agent_api"),
    (AGENT_CREDENTIALS_PATH, "agent_api"),
    (f"{AGENT_ROUTES_PREFIX}/unknown/deeper", "agent_api"),
]


@pytest.mark.parametrize(("path", "function"), ROUTED)
def test_the_shape_sends_the_agents_subtree_to_their_function_and_every_other_path_to_the_api(path, function):
    # Given the deployment's shape
    # When a path is routed
    # Then the agents' resource and everything beneath it reach agent_api, every other path the users' api
    assert SHAPE.api_function_for(path) == function


def _call(app: ProxyApp, path: str) -> dict[str, Any]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO(b"")}
    setup_testing_defaults(environ)
    body = b"".join(SigningMiddleware(app)(environ, lambda status, headers: None))
    return json.loads(body)


def _recording(name: str) -> Any:
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen = {
            "function": name,
            "context": context.function_name,
            "resource": event["resource"],
            "resourcePath": event["requestContext"]["resourcePath"],
            "pathParameters": event["pathParameters"],
            "path": event["path"],
        }
        return {"statusCode": 200, "body": json.dumps(seen)}

    return handler


@pytest.mark.parametrize(("path", "function"), ROUTED)
def test_the_emulators_api_gateway_routes_each_path_to_its_function(path, function):
    # Given the emulator's REST proxy with the shape's subtrees, each function's handler recording its event
    subtrees = {prefix: (_recording(name), f"fn-{name}") for prefix, name in SHAPE.api_routes}
    app = ProxyApp(_recording("api"), "fn-api", subtrees=subtrees)

    # When the path is requested
    seen = _call(app, path)

    # Then the shape's function gets it, invoked under its own name, with the path as sent
    assert (seen["function"], seen["context"], seen["path"]) == (function, f"fn-{function}", path)


@pytest.mark.parametrize(
    ("path", "resource", "parameters"),
    [
        ("/", "/", None),
        ("/jobs/j-1", "/{proxy+}", {"proxy": "jobs/j-1"}),
        (AGENT_ROUTES_PREFIX, AGENT_ROUTES_PREFIX, None),
        (AGENT_REPORTS_PATH, f"{AGENT_ROUTES_PREFIX}/{{proxy+}}", {"proxy": "reports"}),
    ],
)
def test_the_event_names_the_resource_that_matched_and_what_its_proxy_stood_for(path, resource, parameters):
    # Given the emulator's REST proxy with the agents' subtree
    app = ProxyApp(_recording("api"), subtrees={AGENT_ROUTES_PREFIX: (_recording("agent_api"), "fn-agent")})

    # When the path is requested
    seen = _call(app, path)

    # Then the event carries the matched resource (a resource's ANY, or its {proxy+} child) as API Gateway's does
    assert (seen["resource"], seen["resourcePath"], seen["pathParameters"]) == (
        resource,
        resource,
        parameters,
    )


def test_a_shape_that_routes_the_api_to_a_function_it_does_not_declare_is_refused():
    # Given the deployment's routes, and its functions less the agents' API
    functions = tuple(spec for spec in SHAPE.functions if spec.name != "agent_api")

    # When a shape is made of them
    # Then it is refused, naming the function missing; without the routes, it stands
    with pytest.raises(ValueError, match=r"does not declare: \['agent_api'\]"):
        DeploymentShape(functions, SHAPE.tables, SHAPE.buckets, SHAPE.rules, api_routes=SHAPE.api_routes)
    assert (
        DeploymentShape(functions, SHAPE.tables, SHAPE.buckets, SHAPE.rules).api_function_for("/agent")
        == "api"
    )
