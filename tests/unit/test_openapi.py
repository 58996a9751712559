"""The committed OpenAPI document is the one the two API functions' code generates."""

from __future__ import annotations

import json

import pytest

from functions.api.openapi import OPENAPI_FILE, generate, merge


def test_the_committed_openapi_document_is_up_to_date():
    # Given the document generated from the API function's resolver
    generated = generate()
    # When it is compared with the committed openapi.json
    committed = OPENAPI_FILE.read_text(encoding="utf-8") if OPENAPI_FILE.is_file() else ""
    # Then they are the same (run `make openapi` after changing a route or a model)
    assert committed == generated, "openapi.json is stale: run `make openapi` and commit the result"


SUCCESS = {"200", "201", "202", "204"}


def test_every_route_documents_its_success_and_refusals_with_an_error_body():
    # Given the generated document
    document = json.loads(generate())
    # Then every operation answers 2xx and 4xx in documented shapes, and names IAM (SigV4) as its security
    assert document["security"] == [{"sigv4": []}]
    operations = [(path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()]
    # the agent routes included (reports, credentials), POST /code, POST /plan and GET /jobs/{id}/telemetry
    assert len(operations) == 16
    for path, method, operation in operations:
        codes = set(operation["responses"])
        assert codes & SUCCESS, (method, path)
        assert "422" in codes, (method, path)
        for code in codes - SUCCESS:
            schema = operation["responses"][code]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ApiError"}, (method, path, code)


def test_each_api_function_serves_only_the_paths_routed_to_it():
    # Given the two API functions' resolvers and the shape's routing of the API's paths
    from functions.api import agent_app, app
    from spotrun.shape import SHAPE

    served = {
        name: {route.rule.pattern for route in module.app._static_routes + module.app._dynamic_routes}
        for name, module in (("api", app), ("agent_api", agent_app))
    }
    documented = json.loads(generate())["paths"]

    # Then every route of each function is on a path API Gateway sends to that function, and both have routes
    assert served["api"]
    assert served["agent_api"]
    for path in documented:
        owner = SHAPE.api_function_for(path.replace("{", "").replace("}", ""))
        assert any(_route_matches(rule, path) for rule in served[owner]), (path, owner)


def _route_matches(rule: str, documented_path: str) -> bool:
    import re

    concrete = re.sub(r"\{[^}]+\}", "x", documented_path)
    return re.fullmatch(rule.rstrip("$"), concrete) is not None


def test_documents_that_share_a_path_or_differ_on_a_component_are_not_merged():
    # Given two documents of the API
    first = {"paths": {"/jobs": {"get": {}}}, "components": {"schemas": {"ApiError": {"type": "object"}}}}
    agents = {
        "paths": {"/agent/reports": {"post": {}}},
        "components": {"schemas": {"ApiError": {"type": "object"}}},
    }

    # When they are merged, each path and the shared component appear once
    merged = merge(first, agents)
    assert set(merged["paths"]) == {"/jobs", "/agent/reports"}
    assert merged["components"]["schemas"] == {"ApiError": {"type": "object"}}
    assert "/agent/reports" not in first["paths"]  # the inputs are left as they were

    # Then a path both serve, or a component both define differently, is refused
    with pytest.raises(ValueError, match="two functions serve the path /jobs"):
        merge(first, {"paths": {"/jobs": {"post": {}}}})
    with pytest.raises(ValueError, match="schemas/ApiError differs"):
        merge(first, {"components": {"schemas": {"ApiError": {"type": "string"}}}})


def test_a_bodiless_answer_is_documented_without_content():
    # Given the generated document
    document = json.loads(generate())

    # When its 204 answers are read (DELETE /schedules/{name} answers one, with no body and no content type)
    no_content = {
        (method, path): operation["responses"]["204"]
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if "204" in operation["responses"]
    }

    # Then each documents no body: no content at all, not a JSON null
    assert ("delete", "/schedules/{name}") in no_content
    for where, response in no_content.items():
        assert "content" not in response, where
