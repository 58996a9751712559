"""Secrets Manager and Parameter Store access control for instances: a job reads only its own references.

moto serves both services without access control (and its IAM evaluation, when enabled, ignores session
policies). On AWS a job's reads of ``training.secrets`` are judged like this, so the emulator judges them too:

- a session of the job-access role (the agent's credentials for its job) is allowed what both the role's
  inline policies (the deployment's ``secret_references``) and its session policy (the job's own references,
  :func:`spotrun.model.job_access.secret_statements`) allow: the intersection of the two
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session), evaluated by
  :mod:`spotrun.local.policy_eval`; past its expiry it is refused (``ExpiredTokenException``);
- an instance's own role session reaches nothing of either: the instance role has no Secrets Manager statement,
  and its SSM managed policy's parameter reads are denied on the allowed references
  (:func:`spotrun.model.job_access.instance_secret_denials`), the only parameters the emulator holds.

The action is the service's IAM action for the request (``secretsmanager:GetSecretValue``,
``ssm:GetParameter``); the resource is the secret's ARN (its full ARN, when the request names it by name or
partial ARN and it exists) or the parameter's ARN
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssecretsmanager.html,
https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssystemsmanager.html); any other
action is judged on ``*``. A refusal is the service's: HTTP 400 ``AccessDeniedException``
(https://docs.aws.amazon.com/secretsmanager/latest/apireference/CommonErrors.html). ``kms:Decrypt`` through
the service is not judged: moto decrypts nothing.

Anything else (the runtime's, the functions' and the tests' own credentials) is served as before.
"""

from __future__ import annotations

from typing import Any

from spotrun.local.patches import PatchSet
from spotrun.local.s3_access_patch import IsInstanceKey, Verdict, _access_key, _session, judge_session
from spotrun.local.server import ACCOUNT_ID

# What an instance's own role may not do: any Secrets Manager action (it has no statement of it), and the
# parameter reads its SSM managed policy allows, denied on the allowed references (the SSM Agent's other calls
# stay allowed).
_INSTANCE_DENIED_PARAMETER_READS = frozenset({"ssm:GetParameter", "ssm:GetParameters"})


def _instance_denied(action: str) -> bool:
    return action.startswith("secretsmanager:") or action in _INSTANCE_DENIED_PARAMETER_READS


def _denied(principal: str, action: str, resource: str) -> Exception:
    from moto.core.exceptions import JsonRESTError

    return JsonRESTError(
        "AccessDeniedException",
        f"User: {principal} is not authorized to perform: {action} on resource: {resource}",
    )


def _secret_arn(response: Any) -> str:
    secret_id = str(response._get_param("SecretId") or "")
    secrets = response.backend.secrets
    if secret_id and secret_id in secrets:
        return str(secrets[secret_id].arn)
    return (
        secret_id
        if secret_id.startswith("arn:")
        else f"arn:aws:secretsmanager:{response.region}:{ACCOUNT_ID}:secret:{secret_id}"
    )


def _parameter_arn(response: Any) -> str:
    name = str(response._get_param("Name") or "")
    if name.startswith("arn:"):
        return name
    return f"arn:aws:ssm:{response.region}:{ACCOUNT_ID}:parameter/{name.lstrip('/')}"


def install(patches: PatchSet, is_instance_key: IsInstanceKey) -> None:
    """Judge instance credentials' Secrets Manager and SSM requests as AWS would (see the module's docstring).

    Parameters
    ----------
    patches
        Where the patches are kept (undone when the runtime stops).
    is_instance_key
        Whether an access key id is a simulated instance's own role session.
    """
    from moto.core.exceptions import JsonRESTError
    from moto.secretsmanager.responses import SecretsManagerResponse
    from moto.ssm.responses import SimpleSystemManagerResponse

    def judge(prefix: str, resources: dict[str, Any], original: Any) -> Any:
        def authorize(self: Any, resource: str = "*") -> None:
            access_key = _access_key(self.headers, self.querystring)
            action = f"{prefix}:{self._get_action()}"
            target = resources[action](self) if action in resources else "*"
            if access_key is not None and is_instance_key(access_key) and _instance_denied(action):
                raise _denied("the instance role", action, target)
            verdict = judge_session(access_key, action, lambda: [target])
            if verdict is Verdict.UNJUDGED:
                original(self, resource)
            elif verdict is Verdict.EXPIRED:
                raise JsonRESTError(
                    "ExpiredTokenException", "The security token included in the request is expired"
                )
            elif verdict is Verdict.DENIED and access_key is not None:
                raise _denied(_session(access_key).arn, action, target)

        return authorize

    for response, prefix, resources in (
        (SecretsManagerResponse, "secretsmanager", {"secretsmanager:GetSecretValue": _secret_arn}),
        (SimpleSystemManagerResponse, "ssm", {"ssm:GetParameter": _parameter_arn}),
    ):
        original = response._authenticate_and_authorize_normal_action
        patches.add(response, "_authenticate_and_authorize_normal_action", judge(prefix, resources, original))
