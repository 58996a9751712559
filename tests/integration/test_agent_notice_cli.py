"""``spotrun-agent run`` with a ``notice`` command, as SSM runs it: separate processes on one instance."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from spotrun.agent import checkpoint_store
from spotrun.agent.step_runner import EXIT_REPORTED
from spotrun.model import layout
from tests.integration.report_sink import ReportSink
from tests.integration.test_agent import BUCKET, EXAMPLE, REGION, REPO, TOKEN, command, manifest


@pytest.fixture
def instance(tmp_path) -> Iterator[tuple[Any, dict[str, str]]]:
    """A moto server, an S3 client on it, and the environment of an agent process on the instance."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "SPOTRUN_NVME_ROOT": str(tmp_path / "nvme"),
        "SPOTRUN_IMDS_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONPATH": str(REPO),
    }
    client = boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client, env
    finally:
        server.stop()


def put_command(s3: Any, step: str, report_url: str = "", **training: Any) -> str:
    document = command(step, manifest(**training), report_url=report_url)
    key = layout.agent_command_key("j-000000000001", 1, step)
    s3.put_object(Bucket=BUCKET, Key=key, Body=document.model_dump_json().encode())
    return f"s3://{BUCKET}/{key}"


def agent(uri: str, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "spotrun.agent", "run", "--command-uri", uri]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stage_by_hand(nvme_root: Path) -> None:
    job = layout.NvmeLayout(nvme_root, "j-000000000001")
    job.create()
    shutil.copy(EXAMPLE / "train.py", job.code_dir / "train.py")
    subprocess.run([sys.executable, str(EXAMPLE / "generate_data.py"), str(job.data_dir)], check=True)


def test_a_notice_command_interrupts_the_train_agent_and_exits_at_once(instance, tmp_path):
    # Given a train agent running the example on this instance, which has published some progress
    s3, env = instance
    stage_by_hand(tmp_path / "nvme")
    sink = ReportSink().__enter__()
    uri = put_command(s3, "train", sink.url, command=[sys.executable, "train.py", "--step-seconds", "0.02"])
    trainer = agent(uri, env)
    notice_uri = put_command(s3, "notice")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and trainer.poll() is None:
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=layout.progress_key("j-000000000001", 1))
        if listed["KeyCount"]:
            break
        time.sleep(0.05)

    # When the control plane's notice command runs beside it
    started = time.monotonic()
    notifier = agent(notice_uri, env)
    notice_out, notice_err = notifier.communicate(timeout=30)
    notice_seconds = time.monotonic() - started
    train_out, train_err = trainer.communicate(timeout=60)

    # Then the notice agent exited 0 at once, reporting nothing
    assert notifier.returncode == EXIT_REPORTED, notice_err
    assert notice_seconds < 10
    assert "delivered to its train step" in notice_err
    assert "reported" not in notice_err
    # and the train agent checkpointed and reported Spot.Interrupted for the SSM notice
    assert trainer.returncode == EXIT_REPORTED, train_err
    assert "interruption notice: interruption (notice sent through SSM)" in train_err
    assert "reported Spot.Interrupted" in train_err
    sink.__exit__()
    assert sink.kinds()[-1] == "failure"
    assert sink.posts[-1][1]["error"] == "Spot.Interrupted"
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    assert latest is not None
    assert f"checkpoint step {latest.step} committed" in train_err
    progress = json.loads(
        s3.get_object(Bucket=BUCKET, Key=layout.progress_key("j-000000000001", 1))["Body"].read()
    )
    assert progress["step"] == latest.step
    assert TOKEN not in notice_out + notice_err + train_out + train_err

    # When the same notice comes again, now that no train step runs
    again = agent(notice_uri, env)
    _, again_err = again.communicate(timeout=30)

    # Then it is a logged no-op
    assert again.returncode == EXIT_REPORTED, again_err
    assert "no train step of it runs on this instance; nothing to do" in again_err
