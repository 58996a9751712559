"""The transfer bench's CRT tool against the emulator's S3: it counts only bytes the CRT verified.

``make bench`` reports the CRT's client CPU-seconds per *verified* GiB (bench/transfer_crt.py); these tests hold
that word to what the CRT does: a body that differs from S3's checksum fails, an object the CRT cannot check fails
rather than counting, and its uploads leave the full-object CRC-32 and the marker's SHA-256 that staging checks.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config

from bench.transfer_crt import CrtTool, CrtTransferError, crt_stage, crt_upload
from spotrun.agent.transfer.client_config import transfer_config
from spotrun.agent.transfer.ranges import RANGED_THRESHOLD
from spotrun.agent.transfer.upload import upload_file
from spotrun.local.server import FAKE_CREDENTIALS
from spotrun.model import layout
from tests.integration.conftest import corrupt_in_storage
from tests.integration.crt.conftest import BUCKET, client_of

SMALL = random.Random(11).randbytes(1024 * 1024 + 5)
LARGE = random.Random(12).randbytes(RANGED_THRESHOLD + 3 * 1024 * 1024 + 1)


@pytest.fixture
def tool(endpoint) -> CrtTool:
    return CrtTool(
        endpoint,
        "us-east-1",
        FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def _uploaded(s3: Any, tmp_path: Path, key: str, body: bytes) -> None:
    source = tmp_path / "source" / Path(key).name
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(body)
    upload_file(s3, source, BUCKET, key)


def test_the_crt_stages_one_get_and_ranged_objects_and_counts_their_bytes(s3, tool, tmp_path):
    # Given a small and a large object as spotrun uploads them (each with its full-object CRC-32)
    _uploaded(s3, tmp_path, "data/set/small.bin", SMALL)
    _uploaded(s3, tmp_path, "data/set/large.bin", LARGE)
    destination = tmp_path / "staged"
    destination.mkdir()

    # When the bench's CRT tool stages the prefix
    moved = crt_stage(tool, s3, BUCKET, "data/set/", destination, workers=8)

    # Then both files hold the objects' bytes, and every byte is counted
    assert (destination / "small.bin").read_bytes() == SMALL
    assert (destination / "large.bin").read_bytes() == LARGE
    assert moved == len(SMALL) + len(LARGE)


@pytest.mark.parametrize("body", [SMALL, LARGE], ids=["one GET", "ranged"])
def test_a_body_that_differs_from_s3s_checksum_fails_the_crts_staging(s3, tool, tmp_path, body):
    # Given an object whose stored body no longer matches the full-object CRC-32 S3 keeps for it
    _uploaded(s3, tmp_path, "data/bad/object.bin", body)
    corrupt_in_storage(BUCKET, "data/bad/object.bin")
    destination = tmp_path / "staged"
    destination.mkdir()

    # When the CRT stages it, Then it fails on the checksum
    with pytest.raises(CrtTransferError, match="CHECKSUM_MISMATCH"):
        crt_stage(tool, s3, BUCKET, "data/bad/", destination, workers=8)


def test_an_object_the_crt_cannot_check_fails_rather_than_counting(endpoint, s3, tool, tmp_path):
    # Given an object stored without any checksum (a client that sends none)
    plain = client_of(endpoint, transfer_config().merge(Config(request_checksum_calculation="when_required")))
    plain.put_object(Bucket=BUCKET, Key="data/plain/object.bin", Body=SMALL)
    destination = tmp_path / "staged"
    destination.mkdir()

    # When the CRT stages it, Then the measurement fails: the CRT validated nothing
    with pytest.raises(CrtTransferError, match="did not validate"):
        crt_stage(tool, s3, BUCKET, "data/plain/", destination, workers=8)


def test_the_crts_upload_leaves_full_object_crc32s_and_the_markers_sha256s(s3, tool, tmp_path):
    # Given a checkpoint directory with a small and a large file
    source = tmp_path / "checkpoint"
    source.mkdir()
    (source / "small.bin").write_bytes(SMALL)
    (source / "large.bin").write_bytes(LARGE)

    # When the bench's CRT tool uploads it as step 1 of a job
    moved = crt_upload(tool, s3, BUCKET, source, "j-000000000001", 1)

    # Then each object keeps a full-object CRC-32 (the multipart one declared FULL_OBJECT) and its bytes
    assert moved == len(SMALL) + len(LARGE)
    prefix = layout.checkpoint_prefix("j-000000000001", 1)
    for name, body in (("small.bin", SMALL), ("large.bin", LARGE)):
        head = s3.head_object(Bucket=BUCKET, Key=prefix + name, ChecksumMode="ENABLED")
        assert head["ChecksumCRC32"]
        assert s3.get_object(Bucket=BUCKET, Key=prefix + name)["Body"].read() == body
    large = s3.head_object(Bucket=BUCKET, Key=prefix + "large.bin", ChecksumMode="ENABLED")
    # (moto echoes the type as the CRT spells it, in lower case; S3 answers FULL_OBJECT)
    assert large["ChecksumType"].upper() == "FULL_OBJECT"
    # And the commit marker lists each file's SHA-256
    marker = json.loads(
        s3.get_object(Bucket=BUCKET, Key=layout.commit_marker_key("j-000000000001", 1))["Body"].read()
    )
    assert {f["path"]: f["sha256"] for f in marker["files"]} == {
        "small.bin": hashlib.sha256(SMALL).hexdigest(),
        "large.bin": hashlib.sha256(LARGE).hexdigest(),
    }
