"""The agent's progress publisher: the step the script last reported, put in S3 when it changed."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spotrun.agent.supervision.progress import ProgressPublisher, progress_document, read_progress
from spotrun.model import layout


class FakeS3:
    def __init__(self) -> None:
        self.puts: list[dict[str, Any]] = []

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        self.puts.append(kwargs)
        return {}


def documents(s3: FakeS3) -> list[dict[str, Any]]:
    return [json.loads(put["Body"]) for put in s3.puts]


def test_the_step_is_uploaded_when_it_changed_and_only_then(tmp_path):
    # Given a publisher for attempt 2, and no progress file yet
    s3 = FakeS3()
    path = tmp_path / "progress-attempt-002"
    publisher = ProgressPublisher(s3, "bucket", "j-000000000001", 2, path)

    # When it polls before, after, and again after the script wrote step 42
    before = publisher.publish()
    path.write_text("42\n")
    os.utime(path, (1_700_000_000.5, 1_700_000_000.5))
    first = publisher.publish()
    second = publisher.publish()

    # Then one document went up, at the attempt's key, saying the step and when it was written
    assert (before, first, second) == (False, True, False)
    assert [put["Key"] for put in s3.puts] == ["jobs/j-000000000001/progress/attempt-002.json"]
    assert s3.puts[0]["Bucket"] == "bucket"
    assert documents(s3) == [{"step": 42, "updated_at": "2023-11-14T22:13:20.500Z"}]
    assert publisher.last_step == 42

    # When the script moves on
    path.write_text("43\n")
    publisher.publish()

    # Then the new step goes up too
    assert [d["step"] for d in documents(s3)] == [42, 43]


def test_a_garbled_progress_file_is_ignored(tmp_path):
    # Given a file that is not a step
    path = tmp_path / "progress"
    path.write_text("forty-two")
    s3 = FakeS3()

    # When / Then
    assert read_progress(path) is None
    assert ProgressPublisher(s3, "b", "j", 1, path).publish() is False
    assert s3.puts == []


def test_a_failed_upload_is_logged_and_retried_at_the_next_poll(tmp_path, caplog):
    # Given an S3 that fails once
    class FlakyS3(FakeS3):
        failures = 1

        def put_object(self, **kwargs: Any) -> dict[str, Any]:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("S3 unreachable")
            return super().put_object(**kwargs)

    path = tmp_path / "progress"
    path.write_text("7")
    s3 = FlakyS3()
    publisher = ProgressPublisher(s3, "b", "j", 1, path)

    # When it polls twice
    publisher.publish_quietly()
    publisher.publish_quietly()

    # Then the first failure was logged and the step still went up
    assert "could not upload the training progress" in caplog.text
    assert [d["step"] for d in documents(s3)] == [7]
    assert publisher.last_step == 7


def test_progress_document_and_key_formats():
    # Given / When
    document = progress_document(5, datetime(2024, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC))

    # Then
    assert document == {"step": 5, "updated_at": "2024-05-01T12:00:00.250Z"}
    assert layout.progress_key("j-000000000009", 12) == "jobs/j-000000000009/progress/attempt-012.json"
    assert layout.NvmeLayout(Path("/nvme"), "j-000000000009").progress_file(3) == Path(
        "/nvme/spotrun/j-000000000009/runtime/progress-attempt-003"
    )
