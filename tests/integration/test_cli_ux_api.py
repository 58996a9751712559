"""`curl -d` without a content type: the API refuses the form it would be, and says how to send JSON."""

from __future__ import annotations

import json

import boto3

from tests.integration.api_client import TINY, call


def test_curl_d_without_a_content_type_is_a_415_that_says_how_to_send_json(deployment, lambda_context):
    # Given the manifest as `curl -d @manifest.json` sends it: JSON text, labelled as a form
    body = json.dumps(TINY).encode()
    # When it is posted
    answer = call(
        lambda_context, "POST", "/jobs", body, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    # Then it is refused as an unsupported media type (never parsed as a form), with curl's fix, and no job
    assert answer.status == 415
    assert "-H 'Content-Type: application/json'" in answer.body["message"]
    assert boto3.client("dynamodb").scan(TableName=deployment.jobs_table)["Items"] == []


def test_the_api_suggests_the_field_an_unknown_one_meant(deployment, lambda_context):
    # Given a manifest with a misspelt field inside training
    manifest = {**TINY, "training": {**TINY["training"], "comand": ["python", "train.py"]}}
    # When it is posted
    answer = call(lambda_context, "POST", "/jobs", json.dumps(manifest).encode())
    # Then the 422 names the field it meant, as `spotrun validate` does
    assert answer.status == 422
    assert (
        "training.comand: unknown field; did you mean 'command'? (see `spotrun schema`)"
        in answer.body["errors"]
    )
