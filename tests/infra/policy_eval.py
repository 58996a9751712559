"""The synthesized template's identity policies evaluated offline, for tests.

The evaluator is the emulator's (:mod:`spotrun.local.iam.policy.evaluate`, which says what of IAM's logic it follows);
this module feeds it the template's statements. Resources and ARNs are compared in cdk-nag's flattened form
(``<AWS::Region>``, ``<Logical.Arn>``), so a request names them the same way (:func:`flat`). The evaluator
matches an ARN part by part, between colons, so the ``::`` inside a flattened pseudo parameter is hidden from
it on both sides (:func:`_opaque`): ``<AWS::Region>`` stands in one ARN part, as the region it resolves to does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from infra.nag import flatten_reference
from spotrun.local.iam.policy.evaluate import allowed as local_allowed
from spotrun.local.iam.policy.evaluate import allowed_by_all as local_allowed_by_all
from tests.infra.conftest import Synthesized, ref


def flat(value: Any) -> str:
    """A template value (string or intrinsic) in the form requests are written in."""
    return flatten_reference(value)


_REFERENCE = re.compile(r"<[^<>]*>")


def _opaque(text: Any) -> Any:
    """``text`` with the colons inside each flattened ``<...>`` reference replaced, so each stays in one ARN part."""
    if not isinstance(text, str):
        return text
    return _REFERENCE.sub(lambda found: found.group().replace(":", "."), text)


def _policy_text(value: Any) -> str:
    return _opaque(flat(value))


def _context(context: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: _opaque(value) for key, value in (context or {}).items()}


def allowed(
    statements: Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
) -> bool:
    """Whether the template's ``statements`` allow ``action`` on ``resource`` in ``context``."""
    return local_allowed(statements, action, _opaque(resource), _context(context), normalize=_policy_text)


def allowed_by_all(
    policies: Sequence[Sequence[Mapping[str, Any]]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
) -> bool:
    """Whether every one of ``policies`` (a role's statements, a session policy's) allows the request."""
    return local_allowed_by_all(
        policies, action, _opaque(resource), _context(context), normalize=_policy_text
    )


def role_statements(synthesized: Synthesized, role_id: str) -> list[dict[str, Any]]:
    """Every statement of the inline policies attached to ``role_id``."""
    found: list[dict[str, Any]] = []
    for policy in synthesized.resources("AWS::IAM::Policy").values():
        if ref(role_id) in policy["Properties"].get("Roles", []):
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found
