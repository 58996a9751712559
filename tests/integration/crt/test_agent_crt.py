"""The agent makes the CRT's getter beside its S3 client and hands it to staging through a step's context."""

from __future__ import annotations

import dataclasses
import os

import boto3
import pytest

from spotrun.agent import checkpoint_store, step_runner
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.agent.transfer import crt_gets
from spotrun.agent.transfer.crt_gets import CrtGetter
from spotrun.local.server import FAKE_CREDENTIALS
from spotrun.model import layout
from tests.integration import test_agent as agent_tests
from tests.integration.conftest import AGENT_BUCKET
from tests.integration.crt.conftest import BODY

pytestmark = pytest.mark.skipif(
    not crt_gets.crt_available(), reason="the agent extra (awscrt) is not installed"
)


def test_the_agent_uses_the_crt_beside_its_s3_client_and_boto3_without_it(endpoint, monkeypatch):
    # Given the agent's environment pointing at the emulator
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    session = boto3.session.Session(region_name="us-east-1")

    # When the agent asks for its getter, Then it is the CRT's, made once per session
    made = step_runner.direct_getter("us-east-1", session)
    assert isinstance(made, CrtGetter)
    assert step_runner.direct_getter("us-east-1", session) is made

    # And when the CRT cannot be used, Then there is none: staging makes its GETs through boto3
    monkeypatch.setattr(crt_gets, "crt_available", lambda: False)
    assert step_runner.direct_getter("us-east-1", boto3.session.Session(region_name="us-east-1")) is None


def test_the_stage_step_gets_its_inputs_and_checkpoint_through_the_contexts_getter(
    s3, tmp_path, gets, direct
):
    # Given an input, the code and a committed checkpoint of the job, in the emulator's S3
    s3.create_bucket(Bucket=AGENT_BUCKET)
    s3.put_object(Bucket=AGENT_BUCKET, Key="ex/data/features.bin", Body=BODY, ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=AGENT_BUCKET, Key="ex/code/train.py", Body=b"print('train')\n")
    old = agent_tests.write_checkpoint(tmp_path / "old", 100, b"weights")
    checkpoint_store.upload_checkpoint(s3, AGENT_BUCKET, "j-000000000001", 100, old)
    ctx = dataclasses.replace(agent_tests.context(s3, tmp_path / "nvme"), direct=direct)

    # When the stage step runs with the CRT's getter in its context
    status = execute(agent_tests.command("stage", agent_tests.manifest()), ctx)

    # Then the input and the checkpoint's files arrived, none of them through a boto3 GET
    job = layout.NvmeLayout(tmp_path / "nvme", "j-000000000001")
    assert status == EXIT_REPORTED
    assert (job.data_dir / "features.bin").read_bytes() == BODY
    assert (job.checkpoint_dir / "step-000000000100" / "weights.bin").read_bytes() == b"weights"
    assert not [
        path for path in gets if "features.bin" in path or "weights.bin" in path or "meta.json" in path
    ]


def test_the_agents_context_carries_the_crts_getter(endpoint, monkeypatch):
    # Given the agent's environment pointing at the emulator
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)

    # When the agent builds a step's context
    ctx = step_runner.build_context(
        agent_tests.command("stage", agent_tests.manifest()), step_runner.AgentSettings(), dict(os.environ)
    )

    # Then its getter is the CRT's, beside its S3 client
    assert isinstance(ctx.direct, CrtGetter)
    assert ctx.direct is step_runner.direct_getter(agent_tests.REGION)
