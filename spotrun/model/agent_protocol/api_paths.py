"""The REST API's agent routes: where they are, and the subtree of the API that the agent's function serves.

A module of constants only: :mod:`spotrun.shape`, which every Lambda function imports, routes the subtree, and
:mod:`spotrun.model.agent_protocol.command` checks a command's URLs against the routes, without either
loading the other.
"""

from __future__ import annotations

from typing import Final

# Every path under it is the agents' (functions.api.agent_app): API Gateway sends it to that function.
AGENT_ROUTES_PREFIX: Final = "/agent"
# The route the agent posts its reports to (functions.api.agent serves it; the instance role may invoke only this
# one and the next). A command's report_url is that route on the deployment's API: execute-api on AWS, the
# emulator's API Gateway stand-in on the loopback interface locally.
AGENT_REPORTS_PATH: Final = f"{AGENT_ROUTES_PREFIX}/reports"
# Beside it, the route that answers the agent's S3 credentials for its job: a command's report_url names the API,
# and this path on the same stage is where the agent asks.
AGENT_CREDENTIALS_PATH: Final = f"{AGENT_ROUTES_PREFIX}/credentials"


def in_subtree(path: str, prefix: str) -> bool:
    """Whether API Gateway's resource ``prefix`` (or its ``{proxy+}`` child) takes a request for ``path``."""
    return path == prefix or path.startswith(prefix + "/")
