"""The notifications option in the template: a rule per subscriber, encrypted topics, webhooks from secrets.

The stack is synthesized once with three subscribers (cdk-nag runs inside the synth and fails it on a finding):
an e-mail address for ends and budget failures, a webhook for a prefix's interruptions and deadline decisions,
and a webhook with a header for everything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.api import lint_file
from moto import mock_aws

from infra.app import build_app
from infra.options import OptionError, read_notifications
from spotrun.local.patches import ec2_placement
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.provision import provision
from spotrun.notifications import message_transformer, subscription_pattern
from spotrun.shape import SHAPE, STATE_MACHINE_FILE
from tests.infra.conftest import Synthesized, get_att, ref
from tests.infra.test_checks_and_drift import ACCEPTED_LINT_RULES

SLACK_SECRET = "spotrun/slack-webhook"
HOOK_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:spotrun/hook-AbCdEf"
SUBSCRIBERS: list[dict[str, Any]] = [
    {"email": "ml@example.com", "events": ["ended", "budget"]},
    {"webhook_secret": SLACK_SECRET, "events": ["interrupted", "deadline"], "jobs": "nightly-"},
    {"webhook_secret": HOOK_SECRET, "header": "X-Token"},
]


@pytest.fixture(scope="module")
def notifying(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack = build_app(outdir=str(outdir), context={"notifications": json.dumps(SUBSCRIBERS)})
    template = app.synth().get_stack_by_name(stack.stack_name).template
    return Synthesized(outdir=outdir, stack_name=stack.stack_name, template=json.loads(json.dumps(template)))


def ours(template: Synthesized, resource_type: str) -> dict[str, dict[str, Any]]:
    """The notification construct's resources of a type (the stack has an alarm topic and key of its own)."""
    return {k: v for k, v in template.resources(resource_type).items() if k.startswith("Notifications")}


def only_statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def role_policy(template: Synthesized, role_id: str) -> list[dict[str, Any]]:
    (policy,) = [
        p for p in template.resources("AWS::IAM::Policy").values() if ref(role_id) in p["Properties"]["Roles"]
    ]
    return only_statements(policy)


def test_each_subscriber_has_one_rule_on_spotruns_bus_matching_its_kinds(notifying: Synthesized) -> None:
    # Given the subscribers as the option reads them, and the rules in the template
    subscribers = read_notifications(json.dumps(SUBSCRIBERS))
    rules = notifying.marked("notification")
    (bus,) = notifying.marked("bus").values()

    # Then each has its rule, on the bus, with its pattern, its message, an hour of retries and the dead letters
    assert set(rules) == {"notify-1-email", "notify-2-webhook", "notify-3-webhook"}
    (queue,) = ours(notifying, "AWS::SQS::Queue")
    for (name, logical_id), subscriber in zip(sorted(rules.items()), subscribers, strict=True):
        rule = notifying.properties(logical_id)
        assert rule["EventBusName"] == ref(bus)
        assert rule["EventPattern"] == subscription_pattern(subscriber)
        (target,) = rule["Targets"]
        transformer = message_transformer(subscriber.kind)
        assert target["InputTransformer"] == {
            "InputPathsMap": transformer.paths,
            "InputTemplate": transformer.template,
        }, name
        assert "Input" not in target
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 30, "MaximumEventAgeInSeconds": 3600}
        assert target["DeadLetterConfig"] == {"Arn": get_att(queue)}


def test_an_email_subscriber_gets_an_encrypted_tls_only_topic_that_only_its_rule_may_publish_to(
    notifying: Synthesized,
) -> None:
    # Given the e-mail subscriber's rule, topic, subscription and key
    rule = notifying.properties(notifying.marked("notification")["notify-1-email"])
    ((topic_id, topic),) = ours(notifying, "AWS::SNS::Topic").items()
    ((key_id, key),) = ours(notifying, "AWS::KMS::Key").items()
    (subscription,) = ours(notifying, "AWS::SNS::Subscription").values()
    (topic_policy,) = ours(notifying, "AWS::SNS::TopicPolicy").values()

    # Then the topic is encrypted with a rotating key, and mails the address
    assert topic["Properties"]["KmsMasterKeyId"] == get_att(key_id)
    assert key["Properties"]["EnableKeyRotation"] is True
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "ml@example.com"
    assert subscription["Properties"]["TopicArn"] == ref(topic_id)
    # And the topic refuses plain HTTP and grants nothing by its own policy
    statements = only_statements(topic_policy)
    assert [s["Effect"] for s in statements] == ["Deny"]
    assert statements[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    # And the rule publishes through a role that may publish to that topic and use that key, nothing else
    (target,) = rule["Targets"]
    assert target["Arn"] == ref(topic_id)
    role_id = target["RoleArn"]["Fn::GetAtt"][0]
    assert role_policy(notifying, role_id) == [
        {"Action": "sns:Publish", "Effect": "Allow", "Resource": ref(topic_id)},
        {"Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Effect": "Allow", "Resource": get_att(key_id)},
    ]


def test_a_webhook_is_an_api_destination_whose_url_and_token_come_from_the_secret_at_deploy_time(
    notifying: Synthesized,
) -> None:
    # Given the two webhook rules' destinations and connections
    destinations = notifying.resources("AWS::Events::ApiDestination")
    connections = notifying.resources("AWS::Events::Connection")
    rules = notifying.marked("notification")

    for rule_name, secret, header, value in [
        ("notify-2-webhook", SLACK_SECRET, "X-Spotrun-Notification", "spotrun"),
        (
            "notify-3-webhook",
            HOOK_SECRET,
            "X-Token",
            f"{{{{resolve:secretsmanager:{HOOK_SECRET}:SecretString:token::}}}}",
        ),
    ]:
        (target,) = notifying.properties(rules[rule_name])["Targets"]
        destination_id = target["Arn"]["Fn::GetAtt"][0]
        destination = destinations[destination_id]["Properties"]
        connection = connections[destination["ConnectionArn"]["Fn::GetAtt"][0]]["Properties"]

        # Then the URL is a dynamic reference to the secret's url, POSTed, with the connection's header
        assert (
            destination["InvocationEndpoint"] == f"{{{{resolve:secretsmanager:{secret}:SecretString:url::}}}}"
        )
        assert destination["HttpMethod"] == "POST"
        assert connection["AuthorizationType"] == "API_KEY"
        assert connection["AuthParameters"]["ApiKeyAuthParameters"] == {
            "ApiKeyName": header,
            "ApiKeyValue": value,
        }
        # And the rule's role may invoke that destination only
        assert role_policy(notifying, target["RoleArn"]["Fn::GetAtt"][0]) == [
            {"Action": "events:InvokeApiDestination", "Effect": "Allow", "Resource": get_att(destination_id)}
        ]
    # And no output names a secret or a destination
    outputs = json.dumps(notifying.template.get("Outputs", {}))
    assert "secretsmanager" not in outputs
    assert "Notifications" not in outputs


def test_the_notifying_template_passes_cdk_nag_and_cfn_lint(notifying: Synthesized) -> None:
    # Given the synthesized assembly (its synth would have raised on an unacknowledged finding)
    report = json.loads((notifying.outdir / "validation-report.json").read_text())
    template = notifying.outdir / f"{notifying.stack_name}.template.json"

    # When cfn-lint checks the template
    matches = lint_file(template)

    # Then neither reports anything unaccepted
    assert all(plugin.get("summary", {}).get("status") != "failure" for plugin in report["pluginReports"])
    unexpected = [
        f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.id not in ACCEPTED_LINT_RULES
    ]
    assert not unexpected, "\n".join(unexpected)


def test_without_subscribers_the_stack_has_no_notification_resource(synthesized: Synthesized) -> None:
    # Given / Then: the default stack's resources
    assert not synthesized.marked("notification")
    assert not [key for key in synthesized.template["Resources"] if key.startswith("Notifications")]


@pytest.mark.parametrize(
    ("option", "fragment"),
    [
        ([{"webhook": "https://hooks.slack.com/services/T0/B0/secret-token"}], "Secrets Manager secret"),
        ([{"webhook_secret": "s", "header": "X-T", "token": "secret-token"}], "Secrets Manager secret"),
        ([{"email": "not-an-address"}], "not an e-mail address"),
        ([{"email": "a@b.co", "events": ["lunch"]}], "events"),
        ([{"email": "a@b.co", "webhook_secret": "s"}], "exactly one of"),
        ({"email": "a@b.co"}, "JSON list"),
        ("[not json", "JSON list"),
    ],
)
def test_a_subscriber_that_cannot_be_deployed_is_refused_naming_it(option: Any, fragment: str) -> None:
    # Given / When / Then: refused, and never repeating a URL or a token
    raw = option if isinstance(option, str) else json.dumps(option)
    with pytest.raises(OptionError, match="notifications") as refused:
        read_notifications(raw)
    assert fragment in str(refused.value)
    assert "secret-token" not in str(refused.value)


@pytest.fixture
def emulated() -> Iterator[Any]:
    patches = PatchSet()
    ec2_placement.install(patches, ec2_placement.PlacementGroups())
    try:
        with mock_aws():

            def client(service: str) -> Any:
                return boto3.client(
                    service,
                    region_name="us-east-1",
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                )

            yield client
    finally:
        patches.undo_all()


def test_stack_and_emulator_build_the_same_notification_rules(notifying: Synthesized, emulated: Any) -> None:
    # Given the secrets the webhooks name, in the emulator
    for name in ("spotrun/slack-webhook", "spotrun/hook"):
        emulated("secretsmanager").create_secret(
            Name=name, SecretString=json.dumps({"url": "https://hooks.example.com/x", "token": "t"})
        )
    subscribers = read_notifications(
        json.dumps([{**s, "webhook_secret": "spotrun/hook"} if s.get("header") else s for s in SUBSCRIBERS])
    )

    # When the emulator provisions the same subscribers
    deployment = provision(emulated, SHAPE, STATE_MACHINE_FILE, time_scale=1.0, notifications=subscribers)

    # Then it made the same rules, each with its pattern and message
    assert set(deployment.notification_targets) == set(notifying.marked("notification"))
    events = emulated("events")
    for name, logical_id in notifying.marked("notification").items():
        rule = events.describe_rule(Name=f"spotrun-{name}", EventBusName="spotrun-events")
        assert json.loads(rule["EventPattern"]) == notifying.properties(logical_id)["EventPattern"]
        (target,) = events.list_targets_by_rule(Rule=f"spotrun-{name}", EventBusName="spotrun-events")[
            "Targets"
        ]
        template_target = notifying.properties(logical_id)["Targets"][0]
        assert target["InputTransformer"] == template_target["InputTransformer"]
        assert target["RetryPolicy"] == template_target["RetryPolicy"]


def test_context_reads_the_option_from_cdk_json_as_a_list(tmp_path: Path) -> None:
    # Given / When: cdk.json holds real JSON (a list), not a string
    from aws_cdk import App

    from infra.options import StackOptions

    options = StackOptions.from_context(App(context={"notifications": SUBSCRIBERS[:1]}).node)

    # Then it is read as the same subscriber
    assert [s.email for s in options.notifications] == ["ml@example.com"]
