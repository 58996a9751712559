"""Concurrent requests to the API as `spotrun local up` serves it: each is handled in its own environment.

On AWS an execution environment serves one request at a time, so a handler's module state (the Powertools
resolver's current event among it) never sees two requests at once. The emulator must keep it so.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

import pytest

from spotrun.local.api.gateway import ApiServer, ProxyApp
from spotrun.local.patches.lambda_invoke import MAX_ENVIRONMENTS, HandlerRegistry
from tests.sigv4 import signed_request

REQUESTS = 32


def manifest(index: int) -> dict[str, Any]:
    return {"name": f"burst-{index:03d}", "training": {"command": ["python", "train.py", str(index)]}}


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    # Signed as the CLI signs: the stand-in, like API Gateway, refuses an unsigned call.
    request = signed_request(f"{url}/jobs", "POST", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.timeout(120)
def test_concurrent_distinct_submissions_each_get_their_own_job(deployment):
    # Given the API function served as `spotrun local up` serves it: through the function's environments
    registry = HandlerRegistry()
    server = ApiServer(ProxyApp(registry.resolve("spotrun-api", "functions.api.app.handler")))
    url = server.start()
    bodies = [manifest(index) for index in range(REQUESTS)]
    answers: list[tuple[int, Any] | None] = [None] * len(bodies)
    start = threading.Barrier(len(bodies))

    def send(index: int) -> None:
        start.wait()
        answers[index] = post(url, bodies[index], {"Content-Type": "application/json"})

    # When every submission is sent at the same moment
    threads = [threading.Thread(target=send, args=(index,)) for index in range(len(bodies))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
        # and the first is sent again once it has been answered (a retry)
        repeat = post(url, bodies[0], {"Content-Type": "application/json"})
    finally:
        server.stop()

    # Then each distinct manifest got its own job, named as it, and the repeat got the first one's job
    assert all(answer is not None for answer in answers)
    refused = [(bodies[i]["name"], status, body) for i, (status, body) in enumerate(answers) if status != 202]  # type: ignore[misc]
    assert refused == []
    job_ids = [body["job_id"] for _, body in answers]  # type: ignore[misc]
    crossed = [
        (b["name"], j) for b, j in zip(bodies, job_ids, strict=True) if not j.startswith(b["name"] + "-")
    ]
    assert crossed == []
    assert len(set(job_ids)) == REQUESTS
    # (the same job and execution; its outcome says that this request started nothing)
    assert repeat[0] == answers[0][0] == 202  # type: ignore[index]
    assert repeat[1] == {**answers[0][1], "outcome": "duplicate"}  # type: ignore[index]
    assert answers[0][1]["outcome"] == "started"  # type: ignore[index]
    # and the function ran in several environments, up to the emulator's bound
    environments = registry.resolve("spotrun-api", "functions.api.app.handler").created  # type: ignore[attr-defined]
    assert 1 < environments <= MAX_ENVIRONMENTS
