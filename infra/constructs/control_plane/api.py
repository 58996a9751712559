"""The REST API: API Gateway proxying each path to its function, every method behind IAM (SigV4).

Every path goes to the ``api`` function but the subtrees the shape routes elsewhere (``/agent`` and beneath it, to
``agent_api``: :attr:`spotrun.shape.DeploymentShape.api_routes`). A resource of API Gateway's takes the requests
for its own path, and its ``{proxy+}`` child those for every path beneath it; the most specific resource wins
(https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-set-up-simple-proxy.html).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.nag import acknowledge
from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH, AGENT_REPORTS_PATH

# Steady requests per second and burst for the whole stage: a control plane, not a data plane.
THROTTLE_RATE = 20
THROTTLE_BURST = 40
STAGE_NAME = "v1"
# The agent's routes (functions.api.agent): the only ones the instance role may invoke.
AGENT_REPORTS_METHOD = "POST"


class RestApi(Construct):
    """API Gateway REST API in front of the API's functions.

    Every resource and method, the root and the ``{proxy+}`` catch-alls included, requires IAM authorization:
    callers sign requests with SigV4 and need ``execute-api:Invoke`` on the API. Each function routes its requests
    itself (Powertools' resolver); together they own the OpenAPI document (``openapi.json``).

    Parameters
    ----------
    function
        The function every path goes to that no subtree claims.
    subtrees
        Path (``/agent``) -> the function that serves it and every path beneath it.

    Attributes
    ----------
    api
        The REST API.
    url
        URL of its stage.
    agent_reports_url
        URL of the agent's route (``POST``), where instances report their steps.
    agent_reports_arn
        The ``execute-api:Invoke`` resource of that route alone.
    agent_credentials_url, agent_credentials_arn
        The same for the route where the agent gets its job's S3 credentials (``POST``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.IFunction,
        subtrees: Mapping[str, lambda_.IFunction] | None = None,
    ):
        super().__init__(scope, construct_id)
        access_logs = logs.LogGroup(
            self, "AccessLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        self.api = apigw.RestApi(
            self,
            "Api",
            description="spotrun jobs API (IAM auth); its OpenAPI document is openapi.json in the repository",
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=True,
            cloud_watch_role_removal_policy=RemovalPolicy.DESTROY,
            deploy_options=apigw.StageOptions(
                stage_name=STAGE_NAME,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # request bodies (manifests) stay out of the execution logs
                tracing_enabled=True,
                throttling_rate_limit=THROTTLE_RATE,
                throttling_burst_limit=THROTTLE_BURST,
            ),
        )
        _proxy(self.api.root, function)
        for path, served_by in (subtrees or {}).items():
            _proxy(self.api.root.resource_for_path(path), served_by)
        self.url = self.api.url
        # Built from the API's id, not from its stage: the agent_step function's setting would otherwise wait
        # for the deployment, which waits for the api function, which waits for the state machine, which waits
        # for agent_step (a cycle).
        stage_url = f"https://{self.api.rest_api_id}.execute-api.{Aws.REGION}.{Aws.URL_SUFFIX}/{STAGE_NAME}"
        self.agent_reports_url = f"{stage_url}{AGENT_REPORTS_PATH}"
        self.agent_credentials_url = f"{stage_url}{AGENT_CREDENTIALS_PATH}"
        # The one stage, method and path each: no wildcard (and no cdk-nag finding to excuse).
        self.agent_reports_arn = self.api.arn_for_execute_api(
            AGENT_REPORTS_METHOD, AGENT_REPORTS_PATH, STAGE_NAME
        )
        self.agent_credentials_arn = self.api.arn_for_execute_api(
            AGENT_REPORTS_METHOD, AGENT_CREDENTIALS_PATH, STAGE_NAME
        )
        self._acknowledge()

    def _acknowledge(self) -> None:
        acknowledge(
            self.api,
            "AwsSolutions-APIG2",
            "The API is a proxy to one function whose resolver validates every parameter and body against the "
            "same pydantic models that generate the OpenAPI document, answering 4xx with the problems named; "
            "an API Gateway request validator would duplicate that with a second copy of the schema.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "The API is IAM-authorized (SigV4) and throttled per stage; a WAF web ACL is an account-level "
            "choice (and cost) left to the deployer, who can associate one with the stage.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-COG4",
            "Callers are AWS principals (CLI, CI roles) authorized with IAM (SigV4), not end users of a Cognito "
            "user pool: every method's AuthorizationType is AWS_IAM.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "API Gateway's account-level role for execution logs must carry this AWS-managed policy; it only "
            "writes to CloudWatch Logs.",
        )


def _proxy(resource: apigw.IResource, function: lambda_.IFunction) -> None:
    """``ANY`` on ``resource`` and on its ``{proxy+}`` child, both a Lambda proxy integration of ``function``."""
    integration = apigw.LambdaIntegration(function)
    resource.add_method("ANY", integration)
    resource.add_proxy(default_integration=integration, any_method=True)
