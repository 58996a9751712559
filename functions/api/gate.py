"""What both API functions do around their resolver: the same validation, the same refusals before routing.

API Gateway sends the agent's routes (``/agent`` and below) to the ``agent_api`` function and every other path to
``api`` (:data:`spotrun.shape.SHAPE`'s ``api_routes``). Each function builds its resolver with :func:`resolver`
and answers through :func:`answer`, so a caller gets the same 405, 413, 415 and 400 from either. A route gets the
ports of the function serving it with :func:`ports_of`.
"""

from __future__ import annotations

import base64
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router

from functions.api.errors import ApiError
from functions.runtime import Ports, RawInvocation
from spotrun.model.manifest.json_text import read_json_body

MAX_BODY_BYTES = 256 * 1024
FORM = "application/x-www-form-urlencoded"  # `curl -d`'s default: never parsed as a form


def resolver() -> APIGatewayRestResolver:
    """A REST resolver that validates against the routes' models; bodies read within the manifest reader's bounds.

    Hostile JSON is a 400, never a RecursionError (500).

    Returns
    -------
    APIGatewayRestResolver
        A resolver with no route yet.
    """
    return APIGatewayRestResolver(enable_validation=True, json_body_deserializer=read_json_body)


def answer(app: APIGatewayRestResolver, invocation: RawInvocation, aws: Ports) -> dict[str, Any]:
    """The response to one API Gateway proxy event: a refusal before routing, or what ``app`` resolves.

    Parameters
    ----------
    app
        The function's resolver, its routes included.
    invocation
        The proxy event and the invocation's context.
    aws
        The function's ports, which its routes get with :func:`ports_of`.

    Returns
    -------
    dict[str, Any]
        The proxy integration's response.
    """
    event = invocation.event
    refused = _refuse_unrouted(app, event) or _refuse_method(app, event) or _refuse_body(event)
    if refused is not None:
        status, message, *headers = refused
        return {
            "statusCode": status,
            "headers": {"Content-Type": content_types.APPLICATION_JSON, **dict(headers)},
            "body": ApiError(message=message).model_dump_json(),
            "isBase64Encoded": False,
        }
    # Powertools' context is the resolver's and every router's it includes; the resolver clears it at the end.
    app.append_context(ports=aws)
    return app.resolve(event, invocation.context)


def ports_of(router: APIGatewayRestResolver | Router) -> Ports:
    """The ports of the function serving the request a route of ``router`` (or the resolver itself) answers."""
    aws: Ports = router.context["ports"]  # put there by answer()
    return aws


def _routes_of(app: APIGatewayRestResolver, path: str) -> list[Any]:
    """The routes whose rule takes ``path`` whole.

    fullmatch: Powertools matches with ``match`` and rules that end in ``$``, which also matches before a trailing
    newline: ``/jobs/%0A`` would be answered as ``/jobs`` (the list), ``/schedules/%0A`` as ``/schedules``.
    """
    return [route for route in app._static_routes + app._dynamic_routes if route.rule.fullmatch(path)]


def _refuse_unrouted(app: APIGatewayRestResolver, event: dict[str, Any]) -> tuple[int, str] | None:
    """404 for a path no route takes whole (a job id of ``\n`` is no job, and not the list of jobs)."""
    path = str(event.get("path") or "/")
    if _routes_of(app, path):
        return None
    return 404, f"no such resource: {path!r}"


def _refuse_method(
    app: APIGatewayRestResolver, event: dict[str, Any]
) -> tuple[int, str, tuple[str, str]] | None:
    """405, with the methods the path allows, for a path that exists but not with this method (RFC 9110 15.5.6)."""
    method = str(event.get("httpMethod") or "").upper()
    path = str(event.get("path") or "/")
    routes = _routes_of(app, path)
    allowed = sorted({route.method.upper() for route in routes})
    if not allowed or method in allowed:
        return None
    return (
        405,
        f"{method} is not allowed on {path}; allowed: {', '.join(allowed)}",
        ("Allow", ", ".join(allowed)),
    )


def _content_type(event: dict[str, Any]) -> str | None:
    for name, value in (event.get("headers") or {}).items():
        if name.lower() == "content-type":
            return str(value)
    return None


def _refuse_body(event: dict[str, Any]) -> tuple[int, str] | None:
    """413 for a body over the limit, 415 for one not sent as JSON, 400 for one that is not UTF-8 text."""
    body = event.get("body") or ""
    content_type = _content_type(event)
    media_type = (content_type or "").split(";")[0].strip().lower()
    # Powertools would parse a form as the manifest, and fail on any other type: the API takes JSON only.
    if body and media_type not in ("", content_types.APPLICATION_JSON):
        message = f"the body must be JSON (Content-Type: application/json), not {content_type!r}"
        if media_type == FORM:  # what `curl -d` sends unless told otherwise: say how to tell it
            message += "; with curl, add -H 'Content-Type: application/json' (or use --json)"
        return 415, message
    raw = body.encode()
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(raw, validate=True)
        except ValueError:
            return 400, "the body is not valid base64"
    if len(raw) > MAX_BODY_BYTES:
        return 413, f"the body has {len(raw)} bytes; the limit is {MAX_BODY_BYTES}"
    try:
        raw.decode()
    except UnicodeDecodeError as exc:
        return 400, f"the body is not UTF-8 text (byte {exc.start})"
    return None
