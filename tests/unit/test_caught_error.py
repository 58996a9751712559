"""Reading the {"Error", "Cause"} a Catch puts in the workflow state: one parser for every step."""

from __future__ import annotations

import json

from spotrun.model.agent_protocol.command import FailureCause, read_caught_error


def test_the_agents_cause_is_read_as_a_failure_cause():
    # Given the agent's cause sent with SendTaskFailure
    cause = FailureCause(message="reclaimed", last_step=137).model_dump_json()
    # When it is read
    caught = read_caught_error({"Error": "Spot.Interrupted", "Cause": cause})
    # Then its fields are there, and it is no Lambda error
    assert caught.error == "Spot.Interrupted"
    assert caught.failure is not None
    assert (caught.failure.message, caught.failure.last_step) == ("reclaimed", 137)
    assert caught.lambda_message is None


def test_a_lambda_error_payload_gives_its_message():
    # Given the payload of an exception a Lambda raised
    cause = json.dumps({"errorType": "Instance.Lost", "errorMessage": "instance i-1 is terminated"})
    # When it is read
    caught = read_caught_error({"Error": "Instance.Lost", "Cause": cause})
    # Then its message is the Lambda's, and it is no agent cause
    assert caught.lambda_message == "instance i-1 is terminated"
    assert caught.failure is None


def test_plain_text_and_missing_parts_are_kept_as_they_are():
    # Given a cause in plain text, and a state holding nothing
    text = read_caught_error({"Error": "States.Timeout", "Cause": "the task timed out"})
    empty = read_caught_error({})
    # Then the text is kept and nothing is made up
    assert (text.error, text.cause, text.failure, text.lambda_message) == (
        "States.Timeout",
        "the task timed out",
        None,
        None,
    )
    assert (empty.error, empty.cause, empty.failure) == (None, "", None)
