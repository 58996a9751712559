"""S3's EventBridge events in the emulator carry the fields of the request that caused them.

https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from spotrun.local.patches import events
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.patches.s3_events import Sequencer, later

BUCKET = "spotrun-events-test"
CLIENT_ADDRESS = "127.0.0.5"  # a loopback address of its own, so the event's source ip is the caller's


class Emulator:
    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        session = boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        )
        self.s3 = session.client("s3", endpoint_url=endpoint)
        self.sqs = session.client("sqs", endpoint_url=endpoint)
        self.events = session.client("events", endpoint_url=endpoint)
        self.queue_url = ""
        self.received: list[dict[str, Any]] = []

    def events_for(self, key: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait for ``count`` events about ``key`` on the queue; in the order they were received."""
        deadline = time.monotonic() + timeout
        while True:
            found = [event for event in self.received if event["detail"]["object"]["key"] == key]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            answer = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            )
            self.received.extend(json.loads(message["Body"]) for message in answer.get("Messages", []))
            time.sleep(0.05)


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """moto's server with the emulator's events patches, a bucket sending to EventBridge, a rule to a queue."""
    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    patches = PatchSet()
    dispatcher = events.Dispatcher()
    events.install(patches, dispatcher)
    emulator = Emulator(f"http://127.0.0.1:{server._server.server_port}")  # type: ignore[union-attr]
    try:
        emulator.s3.create_bucket(Bucket=BUCKET)
        emulator.s3.put_bucket_notification_configuration(
            Bucket=BUCKET, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
        emulator.queue_url = emulator.sqs.create_queue(QueueName=f"events-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        queue_arn = emulator.sqs.get_queue_attributes(
            QueueUrl=emulator.queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        emulator.events.put_rule(Name="s3-events", EventPattern=json.dumps({"source": ["aws.s3"]}))
        emulator.events.put_targets(Rule="s3-events", Targets=[{"Id": "queue", "Arn": queue_arn}])
        yield emulator
    finally:
        dispatcher.close()
        patches.undo_all()
        server.stop()


def _put_from(emulator: Emulator, key: str, body: bytes) -> int:
    """A presigned PUT sent from :data:`CLIENT_ADDRESS`, as a user's own HTTP client would."""
    url = emulator.s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": key})
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(
        parts.hostname or "127.0.0.1", parts.port, source_address=(CLIENT_ADDRESS, 0)
    )
    try:
        connection.request("PUT", f"{parts.path}?{parts.query}", body=body)
        return connection.getresponse().status
    finally:
        connection.close()


def test_events_carry_the_requests_id_and_source_and_a_growing_sequencer(emulator: Emulator) -> None:
    # Given / When one key is written twice from the user's address, then deleted
    assert _put_from(emulator, "data/a.bin", b"first") == 200
    assert _put_from(emulator, "data/a.bin", b"second") == 200
    emulator.s3.delete_object(Bucket=BUCKET, Key="data/a.bin")

    # Then each event names its own request, the caller's address and a later sequencer than the one before
    first, second, deleted = emulator.events_for("data/a.bin", 3)
    assert [e["detail-type"] for e in (first, second, deleted)] == [
        "Object Created",
        "Object Created",
        "Object Deleted",
    ]
    assert first["detail"]["source-ip-address"] == CLIENT_ADDRESS
    assert second["detail"]["source-ip-address"] == CLIENT_ADDRESS
    ids = {e["detail"]["request-id"] for e in (first, second, deleted)}
    assert len(ids) == 3
    assert "N4N7GDK58NMKJ12R" not in ids  # the documentation example moto copies
    sequencers = [e["detail"]["object"]["sequencer"] for e in (first, second, deleted)]
    assert all(int(s, 16) >= 0 for s in sequencers)  # hexadecimal
    assert later(sequencers[0], sequencers[1])
    assert later(sequencers[1], sequencers[2])
    assert (deleted["detail"]["reason"], deleted["detail"]["deletion-type"]) == (
        "DeleteObject",
        "Permanently Deleted",
    )


def test_tags_added_only_by_the_tagging_api(emulator: Emulator) -> None:
    # Given / When an object is put (moto stores its empty tag set), then tagged with PutObjectTagging
    emulator.s3.put_object(Bucket=BUCKET, Key="tagged.bin", Body=b"x")
    emulator.s3.put_object_tagging(
        Bucket=BUCKET, Key="tagged.bin", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}
    )

    # Then the put raised one Object Created and the tagging one Object Tags Added, nothing more
    events = emulator.events_for("tagged.bin", 3, timeout=0.5)
    assert [e["detail-type"] for e in events] == ["Object Created", "Object Tags Added"]


def test_reason_names_the_api_that_created_the_object(emulator: Emulator) -> None:
    # Given one object created by each of S3's four ways
    s3 = emulator.s3
    s3.put_object(Bucket=BUCKET, Key="put.bin", Body=b"x")
    s3.copy_object(Bucket=BUCKET, Key="copy.bin", CopySource={"Bucket": BUCKET, "Key": "put.bin"})
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="multipart.bin")["UploadId"]
    part = s3.upload_part(Bucket=BUCKET, Key="multipart.bin", UploadId=upload, PartNumber=1, Body=b"y")
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key="multipart.bin",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    post = s3.generate_presigned_post(Bucket=BUCKET, Key="post.bin")
    boundary = uuid.uuid4().hex
    fields = [*post["fields"].items()]
    form = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields
    )
    form += f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="post.bin"\r\n\r\nz\r\n'.encode()
    form += f"--{boundary}--\r\n".encode()
    parts = urllib.parse.urlsplit(post["url"])
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
    connection.request(
        "POST", parts.path, body=form, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    assert connection.getresponse().status in (200, 204)
    connection.close()

    # When their events arrive (moto queues them before it answers)
    events = {
        key: emulator.events_for(key, 2, timeout=0.5)
        for key in ("put.bin", "copy.bin", "multipart.bin", "post.bin")
    }

    # Then each object raised one event, whose reason names the API as AWS documents it
    assert {key: [e["detail"]["reason"] for e in found] for key, found in events.items()} == {
        "put.bin": ["PutObject"],
        "copy.bin": ["CopyObject"],
        "multipart.bin": ["CompleteMultipartUpload"],
        "post.bin": ["POST Object"],
    }


def test_sequencers_compare_by_right_padding() -> None:
    # Given S3's rule: right-pad the shorter sequencer with zeros, then compare the strings
    # (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html)
    # When / Then a shorter sequencer can be the later one, and a fresh sequencer follows the last
    assert later("0055AED6DCD90281E4", "0056")
    assert not later("0056", "0055AED6DCD90281E4")
    assert not later("0056", "005600")  # equal once padded: not a later event
    sequencer = Sequencer()
    first, second = sequencer.next(), sequencer.next()
    assert later(first, second)
