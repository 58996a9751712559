"""A Lambda context as the Python runtime passes it, for tests that call a handler directly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FakeLambdaContext:
    """The attributes of the runtime's context object that handlers and Powertools read; 60 s left, always."""

    function_name: str
    invoked_function_arn: str
    log_group_name: str
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    log_stream_name: str = "test"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def lambda_context(function_name: str = "spotrun-test", region: str = "us-east-1") -> FakeLambdaContext:
    """The context of an invocation of ``function_name`` in ``region``."""
    return FakeLambdaContext(
        function_name=function_name,
        invoked_function_arn=f"arn:aws:lambda:{region}:123456789012:function:{function_name}",
        log_group_name=f"/aws/lambda/{function_name}",
    )
