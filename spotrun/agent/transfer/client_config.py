"""How the agent's boto3 clients are configured for transfers: one home for the pool, retries and signing.

:func:`spotrun.agent.step_runner.aws_client` makes every client of the agent with :func:`transfer_config`, and the
transfer bench (``bench/transfers_tools.py``) gives the same config to spotrun and to the ceiling it is
measured against, so that neither has an advantage of configuration over the other.

- ``max_pool_connections=64``: staging keeps ``2 * DEFAULT_WORKERS`` requests in flight at most (files and
  ranges), and a request that finds no pooled connection waits or opens one it then drops.
- Retries in ``standard`` mode, 8 attempts: a throttled or reset transfer is retried with backoff rather than
  failing a whole staging.
- S3 payload signing off (``payload_signing_enabled=False``). SigV4 over plain HTTP otherwise hashes every
  uploaded byte once more (SHA-256) for the signature; over HTTPS botocore already skips that hash when a
  checksum header is present, and S3 accepts ``UNSIGNED-PAYLOAD`` for a body
  (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html). Integrity is not weakened:
  every upload of :mod:`spotrun.agent.transfer.upload` carries its own checksums (a CRC-32 of the whole object, and of
  each part of a multipart upload) that S3 checks on arrival, and botocore still adds a CRC-32 to any other
  ``PutObject`` (``request_checksum_calculation`` left at ``when_supported``). Only the emulator's endpoint is
  plain HTTP; against real S3 (HTTPS) the bytes signed are the same either way.
"""

from __future__ import annotations

from typing import Any

MAX_POOL_CONNECTIONS = 64
MAX_ATTEMPTS = 8


def transfer_config() -> Any:
    """The ``botocore.config.Config`` of the agent's clients (see the module's docstring for each choice).

    Returns
    -------
    botocore.config.Config
        A fresh config: pool of :data:`MAX_POOL_CONNECTIONS`, standard retries of :data:`MAX_ATTEMPTS`, S3 payload
        signing off.
    """
    from botocore.config import Config

    return Config(
        max_pool_connections=MAX_POOL_CONNECTIONS,
        retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        s3={"payload_signing_enabled": False},
    )
