"""The emulator's S3 served over HTTP, a client of it and the CRT's getter beside that client: the CRT's tests."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.credentials import Credentials

from spotrun.agent.transfer import crt_gets, whole_objects
from spotrun.agent.transfer.client_config import transfer_config
from spotrun.agent.transfer.crt_gets import CrtGetter, crt_getter
from spotrun.agent.transfer.download import StageItem
from spotrun.agent.transfer.upload import upload_file
from spotrun.local.patches import s3_integrity
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.server import FAKE_CREDENTIALS, EmbeddedServer
from tests.conftest import noting

BUCKET = "spotrun-crt-test"
BODY = random.Random(7).randbytes(1024 * 1024 + 3)


@pytest.fixture
def endpoint() -> Iterator[str]:
    """The emulator's S3 as the runtime serves it (its S3 patches), on a port of its own, for one test."""
    patches = PatchSet()
    s3_integrity.install(patches)
    server = EmbeddedServer()
    try:
        yield server.start()
    finally:
        server.stop()
        patches.undo_all()


def client_of(endpoint: str, config: Config | None = None) -> Any:
    """A boto3 S3 client of ``endpoint``, configured as the agent's unless ``config`` says otherwise."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=config or transfer_config(),
    )


@pytest.fixture
def s3(endpoint) -> Any:
    client = client_of(endpoint)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def gets(s3) -> list[str]:
    """Keys boto3 itself sent a GetObject for."""
    seen: list[str] = []
    s3.meta.events.register("before-call.s3.GetObject", lambda params, **_: seen.append(params["url_path"]))
    return seen


@pytest.fixture
def direct(s3) -> CrtGetter:
    made = crt_getter(s3, Credentials(**keys()), "us-east-1")
    assert made is not None
    return made


def keys() -> dict[str, str]:
    """The emulator's credentials, as botocore's ``Credentials`` takes them."""
    return {
        "access_key": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }


@pytest.fixture
def hashed(hashed, monkeypatch) -> list[str]:
    """Also each CRC-32 the CRT's callbacks computed as they wrote (``crt_gets.crc32``)."""
    monkeypatch.setattr(crt_gets, "crc32", noting(crt_gets.crc32, lambda *_: hashed.append("crc32")))
    return hashed


@pytest.fixture
def read_back(monkeypatch) -> list[str]:
    """The algorithms a staged file was read back from the page cache for."""
    seen: list[str] = []
    real = whole_objects._read_back_problems
    note = noting(real, lambda descriptor, expectation: seen.append(expectation.algorithm))
    monkeypatch.setattr(whole_objects, "_read_back_problems", note)
    return seen


def item_for(tmp_path: Path, key: str, **fields: Any) -> StageItem:
    """What staging ``key`` of :data:`BUCKET` to ``tmp_path/out`` is."""
    destination = tmp_path / "out" / Path(key).name
    destination.parent.mkdir(exist_ok=True)
    return StageItem(BUCKET, key, destination, **fields)


def uploaded(s3: Any, tmp_path: Path, key: str, body: bytes = BODY) -> None:
    """Upload ``body`` to ``key`` of :data:`BUCKET` as the agent uploads a file."""
    source = tmp_path / "source.bin"
    source.write_bytes(body)
    upload_file(s3, source, BUCKET, key)  # one PUT carrying its CRC-32, as the agent uploads
