"""How the API functions refuse: one error body, its OpenAPI responses, and the exceptions mapped to 4xx.

Every refusal names the problem; nothing answers with a stack trace. An unexpected error is logged with its
trace and answered with a bare 500.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError, ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from pydantic import BaseModel, Field

from spotrun.model.base import DeferredModel
from spotrun.model.errors import InvalidPageToken, JobFinished, JobNotFound, RequestRejected, ScheduleNotFound
from spotrun.model.manifest.parse import describe_error_items


class ApiError(DeferredModel):
    """Why a request was refused."""

    message: str
    errors: list[str] = Field(
        default_factory=list, description="One line per problem, each naming its field."
    )


def error_response(status: int, description: str) -> dict[int, Any]:
    """An OpenAPI ``responses`` entry: ``status`` answers with an :class:`ApiError`."""
    content = {content_types.APPLICATION_JSON: {"model": ApiError}}
    return {status: {"description": description, "content": content}}


def ok_response(model: type[BaseModel], description: str, status: int = 200) -> dict[int, Any]:
    """An OpenAPI ``responses`` entry: ``status`` answers with ``model``."""
    return {
        status: {"description": description, "content": {content_types.APPLICATION_JSON: {"model": model}}}
    }


def refusal(status: int, message: str, errors: list[str] | None = None) -> Response[ApiError]:
    """A response carrying an :class:`ApiError`."""
    return Response(status, content_types.APPLICATION_JSON, ApiError(message=message, errors=errors or []))


def validation_refusal(exc: RequestValidationError) -> Response[ApiError]:
    """400 for a body that is not JSON; 422 naming each parameter or manifest field that fails validation."""
    errors = list(exc.errors())
    if any(error["type"] == "json_invalid" for error in errors):
        details = [str(error.get("ctx", {}).get("error", "")) for error in errors]
        return refusal(400, "the body is not valid JSON", details)
    lines = []
    for error in errors:
        where, *rest = error["loc"] or ("request",)
        [line] = describe_error_items([{**error, "loc": tuple(rest)}])
        lines.append(line if where == "body" else f"{where} {line}")
    return refusal(422, f"{len(lines)} problem(s) in the request", lines)


def register_error_handlers(app: APIGatewayRestResolver, logger: Logger) -> None:
    """Map spotrun's and Powertools' exceptions to refusals on ``app``.

    Parameters
    ----------
    app
        The function's resolver.
    logger
        Where an unexpected error is logged, with its trace.
    """
    fixed: dict[type[Exception], tuple[int, str | None]] = {
        JobNotFound: (404, None),
        ScheduleNotFound: (404, None),
        JobFinished: (409, None),
        InvalidPageToken: (400, None),
    }
    for exception, (status, message) in fixed.items():

        def answer(exc: Exception, status: int = status, message: str | None = message) -> Response[ApiError]:
            return refusal(status, message or str(exc))

        app.exception_handler(exception)(answer)

    app.exception_handler(RequestValidationError)(validation_refusal)

    @app.exception_handler(RequestUnsupportedContentType)
    def _unsupported(exc: RequestUnsupportedContentType) -> Response[ApiError]:
        return refusal(415, "the body must be JSON (Content-Type: application/json)")

    @app.exception_handler(RequestRejected)
    def _rejected(exc: RequestRejected) -> Response[ApiError]:
        return refusal(exc.status, exc.message, exc.errors)

    @app.exception_handler(ServiceError)
    def _service(exc: ServiceError) -> Response[ApiError]:
        # Powertools' own refusals; NotFoundError is a path no route matches (e.g. a job id it cannot hold).
        message = "no such resource" if isinstance(exc, NotFoundError) else str(exc.msg)
        return refusal(exc.status_code, message)

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response[ApiError]:
        logger.error("unexpected error", exc_info=exc)
        return refusal(500, "internal error; the request id is in the function's logs")
