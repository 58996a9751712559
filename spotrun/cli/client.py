"""A client of the spotrun REST API (``openapi.json``): one method per route, each returning the parsed JSON.

It is told where to go and nothing else: a root URL, signed or not (:class:`SpotrunClient`), or a deployed
stack whose ``ApiUrl`` output names the root (:func:`stack_client`). Against a stack, requests are signed with
SigV4 for ``execute-api`` with the default boto3 session's credentials (never printed nor logged). Which API a
command talks to is decided in :mod:`spotrun.cli.target`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError

API_URL_OUTPUT = "ApiUrl"  # the stack's CloudFormation output naming the REST API's root


class ApiError(RuntimeError):
    """The API refused a request (4xx/5xx), or could not be reached (``status`` 0).

    Parameters
    ----------
    status
        HTTP status of the answer; 0 when nothing answered.
    message
        The ``message`` of the API's error body (or a description of the failure).
    errors
        The ``errors`` of the body: one line per problem, each naming its field.
    """

    def __init__(self, status: int, message: str, errors: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = list(errors or [])


class TargetError(RuntimeError):
    """No API to talk to: no running ``spotrun local up``, or no deployed stack with an ``ApiUrl`` output."""


class SpotrunClient:
    """Calls the REST API at ``base_url``.

    Parameters
    ----------
    base_url
        The API's root, e.g. ``http://127.0.0.1:40123`` or the stack's ``ApiUrl``.
    credentials
        Sign each request with SigV4 (service ``execute-api``) with these; None: unsigned.
    region
        Region of the signature.
    timeout
        Seconds to wait for each answer.
    """

    def __init__(
        self,
        base_url: str,
        credentials: Credentials | None = None,
        region: str = "us-east-1",
        timeout: float = 30.0,
    ):
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.region = region
        self.timeout = timeout

    def __repr__(self) -> str:  # never shows the credentials
        return f"SpotrunClient({self.base_url!r}, signed={self.credentials is not None})"

    def prepare(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> AWSRequest:
        """The request as it will be sent (signed when the client has credentials)."""
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        url = self.base_url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        all_headers = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        request = AWSRequest(method=method, url=url, data=data, headers=all_headers)
        if self.credentials is not None:
            SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(request)
        return request

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request; return its decoded JSON body, or raise :class:`ApiError`."""
        prepared = self.prepare(method, path, **kwargs)
        data = prepared.body.encode() if isinstance(prepared.body, str) else prepared.body
        raw = urllib.request.Request(  # noqa: S310 - the URL is the API's, as the target named it
            str(prepared.url), data=data or None, method=method, headers=dict(prepared.headers.items())
        )
        try:
            with urllib.request.urlopen(raw, timeout=self.timeout) as answer:  # noqa: S310
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _error_from_body(exc.code, exc.read(), str(exc.reason)) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, f"the API at {self.base_url} does not answer: {reason}") from None

    # ------------------------------------------------------------------------------------------- routes

    def submit(self, manifest: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """``POST /jobs``: ``{job_id, execution_arn, outcome}``."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return dict(self.request("POST", "/jobs", body=manifest, headers=headers))

    def plan(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """``POST /plan``: the plan of ``manifest`` (pools, prices, estimate, ``problems``); nothing starts."""
        return dict(self.request("POST", "/plan", body=manifest))

    def code_upload(self, sha256: str, size: int) -> dict[str, Any]:
        """``POST /code``: ``{uri, upload: {url, headers, expires_in} | null}`` for the archive of that digest."""
        return dict(self.request("POST", "/code", body={"sha256": sha256, "size": size}))

    def list_jobs(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        next_token: str | None = None,
    ) -> dict[str, Any]:
        """``GET /jobs``: ``{jobs, next_token}``, newest first."""
        query = {"status": status, "name": name, "limit": limit, "next_token": next_token}
        return dict(self.request("GET", "/jobs", query=query))

    def get_job(self, job_id: str) -> dict[str, Any]:
        """``GET /jobs/{id}``: the job view."""
        return dict(self.request("GET", f"/jobs/{_quote(job_id)}"))

    def cancel(self, job_id: str) -> dict[str, Any]:
        """``DELETE /jobs/{id}``: ``{job, execution_stopped, instances_terminated}``."""
        return dict(self.request("DELETE", f"/jobs/{_quote(job_id)}"))

    def logs(
        self,
        job_id: str,
        attempt: int | None = None,
        tail: int | None = None,
        next_token: str | None = None,
    ) -> dict[str, Any]:
        """``GET /jobs/{id}/logs``: ``{job_id, logs: [{attempt, key, stream, source, found, lines, truncated}],
        next_token}``; with ``next_token``, only the lines written since the answer that gave it."""
        query = {"attempt": attempt, "tail": tail, "next_token": next_token}
        return dict(self.request("GET", f"/jobs/{_quote(job_id)}/logs", query=query))

    def telemetry(self, job_id: str) -> dict[str, Any]:
        """``GET /jobs/{id}/telemetry``: ``{job_id, metrics: {name: [{at, attempt, node, step, value}]}, gpu: [{at,
        attempt, node, gpu, utilization, memory_percent, pcie_rx_mib_s, pcie_tx_mib_s}], skipped_lines, thinned,
        parts, parts_read, bytes_read}`` (:class:`spotrun.model.job.telemetry.JobTelemetry` validates it)."""
        return dict(self.request("GET", f"/jobs/{_quote(job_id)}/telemetry"))

    def start_restore(self, job_id: str, days: int | None = None) -> dict[str, Any]:
        """``POST /jobs/{id}/restore``: ``{job_id, readable, objects}``."""
        return dict(self.request("POST", f"/jobs/{_quote(job_id)}/restore", query={"days": days}))

    def restore_status(self, job_id: str) -> dict[str, Any]:
        """``GET /jobs/{id}/restore``: ``{job_id, readable, objects}``."""
        return dict(self.request("GET", f"/jobs/{_quote(job_id)}/restore"))

    def create_schedule(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """``POST /schedules``: the schedule created from a manifest with a ``schedule`` block."""
        return dict(self.request("POST", "/schedules", body=manifest))

    def list_schedules(self) -> dict[str, Any]:
        """``GET /schedules``: ``{schedules: [...]}`` (a bare list is wrapped so)."""
        answer = self.request("GET", "/schedules")
        return {"schedules": answer} if isinstance(answer, list) else dict(answer)

    def delete_schedule(self, name: str) -> dict[str, Any]:
        """``DELETE /schedules/{name}``: nothing (204), given as an empty object."""
        return dict(self.request("DELETE", f"/schedules/{_quote(name)}") or {})

    def schedule_runs(self, name: str) -> dict[str, Any]:
        """``GET /schedules/{name}/runs``: ``{runs: [...]}`` (a bare list is wrapped so)."""
        answer = self.request("GET", f"/schedules/{_quote(name)}/runs")
        return {"runs": answer} if isinstance(answer, list) else dict(answer)


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _error_from_body(status: int, body: bytes, reason: str) -> ApiError:
    """The :class:`ApiError` of an error answer: its ``{message, errors[]}`` body, else the HTTP reason."""
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("message"):
        errors = decoded.get("errors")
        return ApiError(status, str(decoded["message"]), [str(e) for e in errors or []])
    return ApiError(status, f"HTTP {status} {reason}".rstrip())


# ------------------------------------------------------------------------------------------- deployed


def stack_client(stack: str, region: str | None = None) -> SpotrunClient:
    """A SigV4-signing client of the API of a deployed CloudFormation ``stack``, found from its ``ApiUrl`` output.

    Parameters
    ----------
    stack
        Name of the deployment's stack.
    region
        Its region; None: the default boto3 session's (the AWS CLI's), else us-east-1.

    Raises
    ------
    TargetError
        No AWS credentials, the stack cannot be read, or it has no ``ApiUrl`` output.
    """
    session = boto3.session.Session(region_name=region)
    credentials = session.get_credentials()
    if credentials is None:
        raise TargetError("no AWS credentials found for the aws target; configure the AWS CLI")
    where = session.region_name or "us-east-1"
    try:
        stacks = session.client("cloudformation", region_name=where).describe_stacks(StackName=stack)[
            "Stacks"
        ]
    except (ClientError, BotoCoreError) as exc:
        raise TargetError(f"cannot read stack {stack!r} in {where}: {exc}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for s in stacks for o in s.get("Outputs", [])}
    if API_URL_OUTPUT not in outputs:
        raise TargetError(f"stack {stack!r} in {where} has no {API_URL_OUTPUT} output; is it deployed?")
    return SpotrunClient(outputs[API_URL_OUTPUT], credentials=credentials, region=where)
