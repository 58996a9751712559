"""CloudWatch Logs access control for the credentials of instances: a job's session writes only its own stream.

moto serves CloudWatch Logs without access control. On AWS the agent's live log (:mod:`spotrun.agent.log_shipper`)
is written with the job's credentials, a session of the job-access role whose permissions are the intersection
of the role's policy and the session policy
(https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session), which names only the
attempt's stream (:func:`spotrun.model.job_access.job_session_policy`). The emulator judges the two write
actions the same way, with :mod:`spotrun.local.policy_eval`: ``logs:PutLogEvents`` on the stream's ARN,
``arn:aws:logs:<region>:<account>:log-group:<group>:log-stream:<stream>``, and ``logs:CreateLogStream`` on the
group's, ``arn:aws:logs:<region>:<account>:log-group:<group>``
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/iam-access-control-overview-cwl.html; each action's
resource type: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatchlogs.html).
An instance's own role session is refused outright (the instance role holds no CloudWatch Logs statement); a
session past its expiry is refused too. A refusal is CloudWatch Logs' ``AccessDeniedException``, HTTP 400
(https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/CommonErrors.html). Every other caller
(the functions', the runtime's, the tests') is served as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spotrun.local.patches import PatchSet
from spotrun.local.s3_access_patch import IsInstanceKey, Verdict, _access_key, judge_session
from spotrun.local.server import ACCOUNT_ID

# The LogsResponse handlers judged, the IAM action each is, and whether IAM judges it on the stream (else on its
# group): "CreateLogStream: log-group*", "PutLogEvents: log-stream*" in the Service Authorization Reference
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatchlogs.html).
JUDGED = {"create_log_stream": ("logs:CreateLogStream", False), "put_log_events": ("logs:PutLogEvents", True)}


def group_arn(region: str, group: str) -> str:
    """The ARN IAM judges a group's actions against (the Service Authorization Reference's log-group)."""
    return f"arn:aws:logs:{region}:{ACCOUNT_ID}:log-group:{group}"


def stream_arn(region: str, group: str, stream: str) -> str:
    """The ARN IAM judges a stream's writes against."""
    return f"{group_arn(region, group)}:log-stream:{stream}"


def _refused(action: str, resource: str) -> Exception:
    from moto.core.exceptions import JsonRESTError

    return JsonRESTError(
        "AccessDeniedException", f"User is not authorized to perform: {action} on resource: {resource}"
    )


def _judge(response: Any, action: str, on_stream: bool, is_instance_key: IsInstanceKey) -> None:
    access_key = _access_key(response.headers, {})
    group = response._get_param("logGroupName")
    resource = (
        stream_arn(response.region, group, response._get_param("logStreamName"))
        if on_stream
        else group_arn(response.region, group)
    )
    if access_key is not None and is_instance_key(access_key):
        raise _refused(action, resource)
    verdict = judge_session(access_key, action, lambda: [resource])
    if verdict is Verdict.EXPIRED:
        from moto.core.exceptions import JsonRESTError

        raise JsonRESTError("ExpiredTokenException", "The security token included in the request is expired")
    if verdict is Verdict.DENIED:
        raise _refused(action, resource)


def install(patches: PatchSet, is_instance_key: IsInstanceKey) -> None:
    """Judge instance credentials' CloudWatch Logs writes as AWS would (see the module's docstring).

    Parameters
    ----------
    patches
        Where the patches are kept (undone when the runtime stops).
    is_instance_key
        Whether an access key id is a simulated instance's own role session.
    """
    from moto.logs.responses import LogsResponse

    for name, (action, on_stream) in JUDGED.items():
        original: Callable[[Any], str] = getattr(LogsResponse, name)

        def judged(
            self: Any,
            _original: Callable[[Any], str] = original,
            _action: str = action,
            _on_stream: bool = on_stream,
        ) -> str:
            _judge(self, _action, _on_stream, is_instance_key)
            return _original(self)

        patches.add(LogsResponse, name, judged)
