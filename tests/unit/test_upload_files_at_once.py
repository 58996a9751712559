"""How many multipart uploads one checkpoint keeps open at a time (spotrun.agent.transfer.upload.PartUploader)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spotrun.agent.transfer.upload import LARGE_FILES_AT_ONCE, MULTIPART_THRESHOLD, PartUploader, upload_file


class OpenUploads:
    """An S3 client that takes multipart uploads (slowly) and counts how many are open at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.open = 0
        self.most_open = 0
        self.completed: list[str] = []

    def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.open += 1
            self.most_open = max(self.most_open, self.open)
        return {"UploadId": kwargs["Key"]}

    def upload_part(self, **kwargs: Any) -> dict[str, Any]:
        time.sleep(0.02)
        return {"ETag": f'"{kwargs["PartNumber"]}"'}

    def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.open -= 1
            self.completed.append(kwargs["Key"])
        return {}


def test_a_checkpoint_keeps_at_most_two_multipart_uploads_open_at_once(tmp_path):
    # Given four large files uploaded at once through one set of part senders
    paths = []
    for index in range(4):
        path = tmp_path / f"shard-{index}.bin"
        with path.open("wb") as handle:
            handle.truncate(MULTIPART_THRESHOLD)  # sparse: two 8 MiB parts each
        paths.append(path)
    s3 = OpenUploads()
    # When they are uploaded from four threads
    with PartUploader() as parts, ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda path: upload_file(s3, path, "bucket", path.name, parts=parts), paths))
    # Then every file completed, never more than two of them open at a time
    assert sorted(s3.completed) == [path.name for path in paths]
    assert LARGE_FILES_AT_ONCE == 2
    assert s3.most_open == LARGE_FILES_AT_ONCE
