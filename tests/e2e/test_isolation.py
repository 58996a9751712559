"""Isolation between jobs: a training script cannot answer another job's workflow, nor touch its objects.

Both attacks run at once against one victim (one slow job, not two): each has its own job and its own log."""

from __future__ import annotations

import time

from spotrun.aws.adapters import job_store
from spotrun.local.demo import EXAMPLE_PREFIX, drop_manifest, wait_for_job
from spotrun.model.job.record import JobStatus
from spotrun.model.layout import agent_command_key, checkpoints_prefix, log_key
from tests.e2e.conftest import example_manifest, sha256

JOB_TIMEOUT = 240

# A hostile training script: with its own instance's credentials (botocore finds them in the instance's
# IMDS), it signs a forged success for the victim's train step and posts it to the agent route.
ATTACK = """
import json, os, sys, urllib.error, urllib.request
import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

victim, url = sys.argv[1], sys.argv[2]
forged = {
    "job_id": victim, "attempt": 1, "step": "train", "kind": "success",
    "output": {"seconds": 1.0, "outputs": {"key": "forged", "count": 0, "bytes": 0},
               "model_key": "forged", "model_sha256": "0" * 64, "log_key": "forged"},
}
body = json.dumps(forged).encode()
request = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": "application/json"})
credentials = boto3.session.Session().get_credentials().get_frozen_credentials()
SigV4Auth(credentials, "execute-api", os.environ.get("AWS_REGION", "us-east-1")).add_auth(request)
try:
    urllib.request.urlopen(urllib.request.Request(url, data=body, headers=dict(request.headers), method="POST"))
    print("forged report answered 200", flush=True)
except urllib.error.HTTPError as exc:
    print(f"forged report answered {exc.code}", flush=True)
output = os.environ.get("SPOTRUN_OUTPUT_DIR", "output")
os.makedirs(output, exist_ok=True)
with open(os.path.join(output, "model.npy"), "wb") as model:
    model.write(b"attacker")
"""


def victim_in_training(runtime, name: str):
    """Drop a slow copy of the example job named ``name`` and wait until it trains."""
    victim = drop_manifest(
        runtime,
        example_manifest(
            **{
                'command: [python, train.py, --step-seconds, "0.02"]': (
                    'command: [python, train.py, --step-seconds, "0.1"]'
                ),
                "name: tiny-regression": f"name: {name}",
            }
        ),
        f"{name}.yaml",
    )
    store = job_store(runtime.settings.jobs_table, runtime.settings.region)
    deadline = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < deadline:
        job = store.get(victim.job_id)
        if job is not None and job.status is JobStatus.TRAINING:
            return victim
        time.sleep(0.2)
    raise AssertionError("the victim never started training")


# What a hostile script does first, as its agent would: its instance's own session (IMDS), and its job's session
# from the credentials route, signed with the instance's.
BOTH_SESSIONS = """
import json, os, urllib.request
import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

region = os.environ.get("AWS_REGION", "us-east-1")
instance = boto3.session.Session(region_name=region)
url = os.environ["SPOTRUN_AGENT_CREDENTIALS_URL"]
body = json.dumps({"job_id": os.environ["SPOTRUN_JOB_ID"], "attempt": int(os.environ["SPOTRUN_ATTEMPT"])}).encode()
request = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": "application/json"})
SigV4Auth(instance.get_credentials().get_frozen_credentials(), "execute-api", region).add_auth(request)
with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=dict(request.headers), method="POST")) as r:
    own = json.loads(r.read())
job = boto3.session.Session(
    aws_access_key_id=own["access_key_id"], aws_secret_access_key=own["secret_access_key"],
    aws_session_token=own["session_token"], region_name=region,
)
"""


# A hostile training script reaching into the victim's objects: with its instance's own credentials (from IMDS)
# and with its own job's S3 credentials (from the credentials route, as its agent gets them), it reads the
# victim's train command and writes into the victim's checkpoint prefix.
TRESPASS = (
    BOTH_SESSIONS
    + """
import sys
from botocore.exceptions import ClientError

bucket, command_key, checkpoint_key = sys.argv[1:4]
sessions = {"instance": instance, "job": job}
for name, session in sessions.items():
    s3 = session.client("s3")
    for verb, call in (
        ("read", lambda: s3.get_object(Bucket=bucket, Key=command_key)),
        ("write", lambda: s3.put_object(Bucket=bucket, Key=checkpoint_key, Body=b"poison")),
    ):
        try:
            call()
            print(f"{name} {verb} allowed", flush=True)
        except ClientError as exc:
            print(f"{name} {verb} {exc.response['Error']['Code']}", flush=True)
output = os.environ.get("SPOTRUN_OUTPUT_DIR", "output")
os.makedirs(output, exist_ok=True)
with open(os.path.join(output, "model.npy"), "wb") as model:
    model.write(b"attacker")
"""
)


def attacker_manifest(name: str, command: str) -> bytes:
    """The example job named ``name`` running ``command`` instead of its training, never restarted."""
    return example_manifest(
        **{
            'command: [python, train.py, --step-seconds, "0.02"]': f"command: {command}",
            "name: tiny-regression": f"name: {name}",
            "restarts_on_error: 1": "restarts_on_error: 0",
        }
    )


def attempt_log(runtime, job_id: str) -> bytes:
    bucket = runtime.settings.jobs_bucket
    return bytes(runtime.client("s3").get_object(Bucket=bucket, Key=log_key(job_id, 1))["Body"].read())


# One victim serves both attacks: they run side by side while it trains, and each asserts on its own log.
def test_a_training_script_can_neither_answer_another_jobs_workflow_nor_touch_its_objects(
    runtime, direct_model
):
    # Given a victim job training slowly, and two hostile scripts next to the example's code
    bucket = runtime.settings.jobs_bucket
    s3 = runtime.client("s3")
    for name, script in (("attack.py", ATTACK), ("trespass.py", TRESPASS)):
        s3.put_object(Bucket=bucket, Key=f"{EXAMPLE_PREFIX}code/{name}", Body=script.encode())
    victim = victim_in_training(runtime, "victim-job")

    # When one job's training script posts a forged success for the victim's train step, and another's reads
    # the victim's command and writes into its checkpoint prefix
    url = runtime.settings.agent_report_url
    command_key = agent_command_key(victim.job_id, 1, "train")
    checkpoint_key = f"{checkpoints_prefix(victim.job_id)}step-999999999999/_COMMITTED.json"
    forger = drop_manifest(
        runtime,
        attacker_manifest("attacker-job", f'[python, attack.py, "{victim.job_id}", "{url}"]'),
        "attacker-job.yaml",
    )
    trespasser = drop_manifest(
        runtime,
        attacker_manifest(
            "trespass-job", f'[python, trespass.py, "{bucket}", "{command_key}", "{checkpoint_key}"]'
        ),
        "trespass-job.yaml",
    )
    forged = wait_for_job(runtime, forger.job_id, timeout=JOB_TIMEOUT)
    trespassed = wait_for_job(runtime, trespasser.job_id, timeout=JOB_TIMEOUT)
    job = wait_for_job(runtime, victim.job_id, timeout=JOB_TIMEOUT)

    # Then the forged report was refused as not the victim's instance
    assert forged.status is JobStatus.SUCCEEDED, forged.error
    log = attempt_log(runtime, forger.job_id)
    assert b"forged report answered 403" in log, log[-2000:]
    # and every read and write of the victim's objects was refused AccessDenied, with the instance's
    # credentials and with its job's
    assert trespassed.status is JobStatus.SUCCEEDED, trespassed.error
    log = attempt_log(runtime, trespasser.job_id)
    for line in (
        b"instance read AccessDenied",
        b"instance write AccessDenied",
        b"job read AccessDenied",
        b"job write AccessDenied",
    ):
        assert line in log, log[-2000:]
    # and nothing was written into the victim's checkpoints
    assert s3.list_objects_v2(Bucket=bucket, Prefix=checkpoint_key)["KeyCount"] == 0
    # and the victim trained and ended SUCCEEDED with its own model, unchanged by either attack
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert job.model_sha256 == sha256(direct_model)
    assert JobStatus.TRAINING in [change.status for change in job.timeline]
