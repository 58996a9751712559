"""The resources (and condition keys) IAM judges each action on, per service, from the request.

Each entry follows the action's "Resource types" in the Service Authorization Reference; an action listed there
without a resource type (``ec2:DescribeInstances``, ``states:SendTaskSuccess``, ``ssm:DescribeParameters``) is
judged on ``*``, and so is any action not in the table (a statement naming specific resources never allows it):

- DynamoDB: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html
- Step Functions: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsstepfunctions.html
- CloudWatch Logs: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatchlogs.html
- Systems Manager: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssystemsmanager.html
- Secrets Manager: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssecretsmanager.html
- CloudWatch: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html
- Lambda: https://docs.aws.amazon.com/service-authorization/latest/reference/list_awslambda.html
- S3: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html (object actions on
  ``arn:aws:s3:::bucket/key``, bucket actions on ``arn:aws:s3:::bucket``; a copy also reads its source:
  "you must have s3:GetObject permission on the source object",
  https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html and API_UploadPartCopy.html).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from spotrun.local.server import ACCOUNT_ID


@dataclass(frozen=True)
class Request:
    """What the table reads of a request: its IAM action, region and parameters."""

    action: str  # e.g. "dynamodb:GetItem"
    region: str
    param: Callable[[str], Any]  # a request parameter by its API name (None when absent)

    def arn(self, service: str, resource: str) -> str:
        """An ARN of this request's region and the emulated account."""
        return f"arn:aws:{service}:{self.region}:{ACCOUNT_ID}:{resource}"


Resources = Callable[[Request], list[str]]


def table_arn(request: Request, name: str) -> str:
    """A DynamoDB table's ARN (a name may already be one)."""
    return name if name.startswith("arn:") else request.arn("dynamodb", f"table/{name}")


def _table(request: Request) -> list[str]:
    table = table_arn(request, str(request.param("TableName") or ""))
    index = request.param("IndexName")
    return [f"{table}/index/{index}" if index else table]


def _tables_of(items_key: str) -> Resources:
    def resources(request: Request) -> list[str]:
        return [table_arn(request, name) for name in (request.param(items_key) or {})]

    return resources


def _transact_tables(request: Request) -> list[str]:
    names: dict[str, None] = {}
    for item in request.param("TransactItems") or []:
        for operation in item.values():
            names[str(operation.get("TableName", ""))] = None
    return [table_arn(request, name) for name in names]


def group_arn(region: str, group: str) -> str:
    """A log group's ARN as IAM judges the group's actions (the Reference's ``log-group``)."""
    return f"arn:aws:logs:{region}:{ACCOUNT_ID}:log-group:{group}"


def stream_arn(region: str, group: str, stream: str) -> str:
    """A log stream's ARN as IAM judges the stream's actions (the Reference's ``log-stream``)."""
    return f"{group_arn(region, group)}:log-stream:{stream}"


def _group(request: Request) -> list[str]:
    group = request.param("logGroupName") or str(request.param("logGroupIdentifier") or "").rsplit(":", 1)[-1]
    return [group_arn(request.region, str(group))]


def _stream(request: Request) -> list[str]:
    group = request.param("logGroupName") or str(request.param("logGroupIdentifier") or "").rsplit(":", 1)[-1]
    return [stream_arn(request.region, str(group), str(request.param("logStreamName") or ""))]


def parameter_arn(request: Request, name: str) -> str:
    """A parameter's ARN (a name may already be one; a path's leading ``/`` is not doubled)."""
    return name if name.startswith("arn:") else request.arn("ssm", f"parameter/{name.lstrip('/')}")


def _parameter(key: str) -> Resources:
    def resources(request: Request) -> list[str]:
        return [parameter_arn(request, str(request.param(key) or ""))]

    return resources


def _parameters(request: Request) -> list[str]:
    return [parameter_arn(request, str(name)) for name in request.param("Names") or []]


def _secret(request: Request) -> list[str]:
    from moto.secretsmanager.models import secretsmanager_backends

    secret_id = str(request.param("SecretId") or "")
    secrets = secretsmanager_backends[ACCOUNT_ID][request.region].secrets
    if secret_id and secret_id in secrets:
        return [str(secrets[secret_id].arn)]  # a name or partial ARN: the secret's full ARN
    return [
        secret_id if secret_id.startswith("arn:") else request.arn("secretsmanager", f"secret:{secret_id}")
    ]


def _function(request: Request) -> list[str]:
    name = str(request.param("FunctionName") or "")
    return [name if name.startswith("arn:") else request.arn("lambda", f"function:{name}")]


def _named(key: str) -> Resources:
    def resources(request: Request) -> list[str]:
        return [str(request.param(key) or "*")]

    return resources


TABLE: Mapping[str, Resources] = {
    **{
        f"dynamodb:{action}": _table
        for action in (
            "GetItem",
            "PutItem",
            "UpdateItem",
            "DeleteItem",
            "Query",
            "Scan",
            "DescribeTable",
            "UpdateTable",
            "DeleteTable",
            "CreateTable",
        )
    },
    "dynamodb:BatchGetItem": _tables_of("RequestItems"),
    "dynamodb:BatchWriteItem": _tables_of("RequestItems"),
    "dynamodb:TransactWriteItems": _transact_tables,
    "dynamodb:TransactGetItems": _transact_tables,
    "states:StartExecution": _named("stateMachineArn"),
    "states:DescribeStateMachine": _named("stateMachineArn"),
    "states:ListExecutions": _named("stateMachineArn"),
    "states:DescribeExecution": _named("executionArn"),
    "states:StopExecution": _named("executionArn"),
    "states:GetExecutionHistory": _named("executionArn"),
    "logs:CreateLogStream": _group,
    "logs:DescribeLogStreams": _group,
    "logs:FilterLogEvents": _group,
    "logs:DeleteLogGroup": _group,
    "logs:CreateLogGroup": _group,
    "logs:PutRetentionPolicy": _group,
    "logs:PutLogEvents": _stream,
    "logs:GetLogEvents": _stream,
    "logs:DeleteLogStream": _stream,
    "ssm:GetParameter": _parameter("Name"),
    "ssm:GetParameterHistory": _parameter("Name"),
    "ssm:PutParameter": _parameter("Name"),
    "ssm:DeleteParameter": _parameter("Name"),
    "ssm:GetParametersByPath": _parameter("Path"),
    "ssm:GetParameters": _parameters,
    "ssm:DeleteParameters": _parameters,
    **{
        f"secretsmanager:{action}": _secret
        for action in ("GetSecretValue", "DescribeSecret", "PutSecretValue", "UpdateSecret", "DeleteSecret")
    },
    "lambda:InvokeFunction": _function,
    "lambda:GetFunction": _function,
}

# Condition keys the requests supply, per action (the Reference's "Condition keys" column).
CONTEXT: Mapping[str, Callable[[Request], dict[str, Any]]] = {
    "cloudwatch:PutMetricData": lambda r: (
        {"cloudwatch:namespace": r.param("Namespace")} if r.param("Namespace") else {}
    ),
}


def resources(request: Request) -> list[str]:
    """The resource ARNs IAM judges ``request.action`` on (``["*"]`` without resource-level permissions)."""
    found = TABLE.get(request.action)
    return (found(request) or ["*"]) if found else ["*"]


def context(request: Request) -> dict[str, Any]:
    """The condition keys ``request`` supplies."""
    found = CONTEXT.get(request.action)
    return found(request) if found else {}


def s3_copy_source(headers: Any) -> str | None:
    """The ARN of a copy's source object (``x-amz-copy-source``: ``[/]bucket/key[?versionId=...]``), if any."""
    source = headers.get("x-amz-copy-source")
    if not source:
        return None
    path = unquote(str(source).split("?", 1)[0]).lstrip("/")
    return f"arn:aws:s3:::{path}"
