"""The examples the OpenAPI document shows, written without Powertools' OpenAPI document models.

``aws_lambda_powertools.event_handler.openapi.models`` holds the pydantic models of the whole OpenAPI document;
importing it builds them all, which cost the API function about as much as ``import boto3`` at each cold start,
for an example object that only the document generator (:mod:`functions.api.openapi`) ever reads. A plain
mapping of the same fields is what that generator validates into an ``Example``, so the document is unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.openapi.models import Example


def example(summary: str, value: Any) -> Example:
    """An OpenAPI Example Object for a parameter's or a body's ``openapi_examples``.

    Parameters
    ----------
    summary
        The example's one-line summary.
    value
        The example value, as JSON would carry it.

    Returns
    -------
    Example
        A mapping with the fields of Powertools' ``Example`` (typed as one), validated only when the document is
        generated.
    """
    return cast("Example", {"summary": summary, "value": value})
