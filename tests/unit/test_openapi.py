"""The committed OpenAPI document is the one the API function's code generates."""

from __future__ import annotations

import json

from functions.api.openapi import OPENAPI_FILE, generate


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
    assert (
        len(operations) == 15
    )  # the agent routes included (reports, credentials), POST /code and POST /plan
    for path, method, operation in operations:
        codes = set(operation["responses"])
        assert codes & SUCCESS, (method, path)
        assert "422" in codes, (method, path)
        for code in codes - SUCCESS:
            schema = operation["responses"][code]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ApiError"}, (method, path, code)
