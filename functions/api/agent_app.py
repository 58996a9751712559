"""Lambda: the API's agent routes (``/agent`` and below), where instances report steps and get their job's credentials.

A function of its own, beside :mod:`functions.api.app`, so that what the agents may ask for is held by no
function a user's request reaches: answering the workflow's tasks (``states:SendTask*``), assuming the job-access
role and opening training log streams are this function's grants only, and the users' function carries none of
them (``infra/constructs/iam/permissions.py``). API Gateway routes ``/agent`` and everything beneath it here
(:data:`spotrun.shape.SHAPE`'s ``api_routes``); the routes are :mod:`functions.api.agent`'s.
"""

from __future__ import annotations

from functions.import_window import collection_paused

# As the users' API: Powertools' REST resolver, boto3 and the job record, with the collector off while they load.
with collection_paused():
    from typing import Any

    from functions.api.agent import router
    from functions.api.errors import register_error_handlers
    from functions.api.gate import answer, resolver
    from functions.runtime import Ports, RawInvocation, function_handler, logger

app = resolver()
app.include_router(router)
register_error_handlers(app, logger)


@function_handler(RawInvocation)
def handler(invocation: RawInvocation, aws: Ports) -> dict[str, Any]:
    return answer(app, invocation, aws)
