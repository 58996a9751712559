"""A hostile training script tries every cross-job call with both of its credentials: the emulator refuses each as IAM.

The script is a real job's command. It holds two credentials, as on EC2: its instance's role session (botocore
finds it in the instance's IMDS) and its job's session (from the agent's credentials route, as its agent gets
them). With each it reaches for a victim job training next to it: the jobs table (the victim's task token), Step
Functions (a forged success with that token), CloudWatch Logs (the victim's stream), Parameter Store (the
victim's parameter), EC2 and S3 copies from the victim's objects. Each is refused; a parameter outside spotrun's
references is read with the instance role (its SSM managed policy allows it); and unsigned or unknown-key calls
are refused as AWS refuses them.
"""

from __future__ import annotations

import json
import re

from spotrun.aws.adapters import job_store
from spotrun.local.demo import EXAMPLE_PREFIX, drop_manifest, wait_for_job
from spotrun.model.job.record import JobStatus
from spotrun.model.layout import agent_command_key, log_group, log_stream, output_prefix
from tests.e2e.conftest import sha256
from tests.e2e.test_isolation import (
    BOTH_SESSIONS,
    JOB_TIMEOUT,
    attacker_manifest,
    attempt_log,
    victim_in_training,
)

HOSTILE = (
    BOTH_SESSIONS
    + r"""
import json, os
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

t = json.load(open("targets.json"))
for name in ("SPOTRUN_JOBS_TABLE", "SPOTRUN_STATE_MACHINE_ARN", "SPOTRUN_JOB_ACCESS_ROLE_ARN"):
    print(f"env {name} {'present' if name in os.environ else 'absent'}", flush=True)
own_output = t["own_output"].replace("JOB_ID", os.environ["SPOTRUN_JOB_ID"])
own_command = t["own_command"].replace("JOB_ID", os.environ["SPOTRUN_JOB_ID"])
upload = job.client("s3").create_multipart_upload(Bucket=t["bucket"], Key=own_output + "parts")["UploadId"]


def attempt(label, call):
    try:
        answer = call()
        extra = answer.get("Parameter", {}).get("Value", "") if isinstance(answer, dict) else ""
        print(f"{label} allowed {extra}".rstrip(), flush=True)
    except ClientError as exc:
        print(f"{label} {exc.response['Error']['Code']}", flush=True)


victim_key = {"pk": {"S": "JOB#" + t["victim"]}, "sk": {"S": "JOB"}}
forged = json.dumps({"seconds": 1.0, "model_key": "forged", "model_sha256": "0" * 64})
for who, session in (("instance", instance), ("job", job)):
    dynamodb, sfn, logs = session.client("dynamodb"), session.client("stepfunctions"), session.client("logs")
    ssm, ec2, s3 = session.client("ssm"), session.client("ec2"), session.client("s3")
    calls = {
        "dynamodb:Scan": lambda: dynamodb.scan(TableName=t["table"]),
        "dynamodb:GetItem": lambda: dynamodb.get_item(TableName=t["table"], Key=victim_key),
        "dynamodb:UpdateItem": lambda: dynamodb.update_item(
            TableName=t["table"], Key=victim_key, UpdateExpression="SET task_token = :t",
            ExpressionAttributeValues={":t": {"S": "stolen"}},
        ),
        "states:SendTaskSuccess": lambda: sfn.send_task_success(taskToken=t["token"], output=forged),
        "logs:DescribeLogStreams": lambda: logs.describe_log_streams(logGroupName=t["group"]),
        "logs:GetLogEvents": lambda: logs.get_log_events(logGroupName=t["group"], logStreamName=t["stream"]),
        "logs:FilterLogEvents": lambda: logs.filter_log_events(logGroupName=t["group"]),
        "logs:DeleteLogStream": lambda: logs.delete_log_stream(logGroupName=t["group"], logStreamName=t["stream"]),
        "ssm:GetParametersByPath": lambda: ssm.get_parameters_by_path(Path="/spotrun", WithDecryption=True),
        "ssm:GetParameterHistory": lambda: ssm.get_parameter_history(Name=t["parameter"], WithDecryption=True),
        "ssm:DescribeParameters": lambda: ssm.describe_parameters(),
        "ssm:GetParameter": lambda: ssm.get_parameter(Name=t["parameter"], WithDecryption=True),
        "ssm:GetParameter(outside)": lambda: ssm.get_parameter(Name=t["outside"]),
        "ec2:DescribeInstances": lambda: ec2.describe_instances(),
        "s3:CopyObject": lambda: s3.copy_object(
            Bucket=t["bucket"], Key=own_output + "stolen", CopySource={"Bucket": t["bucket"], "Key": t["command"]}
        ),
        "s3:CopyObject(own)": lambda: s3.copy_object(
            Bucket=t["bucket"], Key=own_output + "mine", CopySource={"Bucket": t["bucket"], "Key": own_command}
        ),
        "s3:UploadPartCopy": lambda: s3.upload_part_copy(
            Bucket=t["bucket"], Key=own_output + "parts", UploadId=upload, PartNumber=1,
            CopySource={"Bucket": t["bucket"], "Key": t["command"]},
        ),
    }
    for label, call in calls.items():
        attempt(f"{who} {label}", call)

unsigned = boto3.client("dynamodb", region_name=region, config=Config(signature_version=UNSIGNED))
attempt("unsigned dynamodb:Scan", lambda: unsigned.scan(TableName=t["table"]))
unsigned_s3 = boto3.client("s3", region_name=region, config=Config(signature_version=UNSIGNED))
attempt("unsigned s3:GetObject", lambda: unsigned_s3.get_object(Bucket=t["bucket"], Key=t["command"]))
unknown = dict(aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="x" * 40, region_name=region)
attempt("unknown dynamodb:Scan", lambda: boto3.client("dynamodb", **unknown).scan(TableName=t["table"]))
attempt("unknown s3:GetObject", lambda: boto3.client("s3", **unknown).get_object(Bucket=t["bucket"], Key=t["command"]))
output = os.environ.get("SPOTRUN_OUTPUT_DIR", "output")
os.makedirs(output, exist_ok=True)
with open(os.path.join(output, "model.npy"), "wb") as model:
    model.write(b"attacker")
"""
)

REFUSED = {
    "dynamodb:Scan": "AccessDeniedException",
    "dynamodb:GetItem": "AccessDeniedException",
    "dynamodb:UpdateItem": "AccessDeniedException",
    "states:SendTaskSuccess": "AccessDeniedException",
    "logs:DescribeLogStreams": "AccessDeniedException",
    "logs:GetLogEvents": "AccessDeniedException",
    "logs:FilterLogEvents": "AccessDeniedException",
    "logs:DeleteLogStream": "AccessDeniedException",
    "ssm:GetParametersByPath": "AccessDeniedException",
    "ssm:GetParameterHistory": "AccessDeniedException",
    "ssm:DescribeParameters": "AccessDeniedException",
    "ssm:GetParameter": "AccessDeniedException",
    "ec2:DescribeInstances": "UnauthorizedOperation",
    "s3:CopyObject": "AccessDenied",
    "s3:UploadPartCopy": "AccessDenied",
}
VICTIM_SECRET = "victims-parameter-value-7"
OUTSIDE_VALUE = "outside-spotrun-value-8"


def outcomes(log: bytes) -> dict[str, str]:
    """``"<who> <call>" -> outcome`` of every line the script printed."""
    found = {}
    for line in log.decode(errors="replace").splitlines():
        match = re.match(r"^(instance|job|unsigned|unknown|env) (\S+) (.+)$", line.strip())
        if match:
            found[f"{match[1]} {match[2]}"] = match[3]
    return found


def test_a_training_script_is_refused_every_cross_job_call_with_either_credential(runtime, direct_model):
    # Given a victim job training, with its task token, its live log stream and a parameter under spotrun's
    # references, a parameter outside them, and a hostile script next to the example's code
    bucket = runtime.settings.jobs_bucket
    s3, ssm = runtime.client("s3"), runtime.client("ssm")
    ssm.put_parameter(Name="/spotrun/victim-db", Value=VICTIM_SECRET, Type="SecureString")
    ssm.put_parameter(Name="/team/outside", Value=OUTSIDE_VALUE, Type="String")
    victim = victim_in_training(runtime, "cross-victim")
    store = job_store(runtime.settings.jobs_table, runtime.settings.region)
    record = store.get(victim.job_id)
    assert record is not None
    assert record.task_token, "the victim holds a task token while it trains"
    group = log_group(bucket)
    targets = {
        "bucket": bucket,
        "table": runtime.settings.jobs_table,
        "victim": victim.job_id,
        "token": record.task_token,
        "group": group,
        "stream": log_stream(victim.job_id, 1),
        "parameter": "/spotrun/victim-db",
        "outside": "/team/outside",
        "command": agent_command_key(victim.job_id, 1, "train"),
        "own_output": output_prefix("JOB_ID"),
        "own_command": agent_command_key("JOB_ID", 1, "train"),
    }
    s3.put_object(Bucket=bucket, Key=f"{EXAMPLE_PREFIX}code/hostile.py", Body=HOSTILE.encode())
    s3.put_object(Bucket=bucket, Key=f"{EXAMPLE_PREFIX}code/targets.json", Body=json.dumps(targets).encode())

    # When a job runs the hostile script as its command
    attacker = drop_manifest(
        runtime, attacker_manifest("cross-attacker", "[python, hostile.py]"), "cross.yaml"
    )
    attacked = wait_for_job(runtime, attacker.job_id, timeout=JOB_TIMEOUT)
    job = wait_for_job(runtime, victim.job_id, timeout=JOB_TIMEOUT)

    # Then every cross-job call was refused, with the instance role and with the job's session alike
    assert attacked.status is JobStatus.SUCCEEDED, attacked.error
    log = attempt_log(runtime, attacker.job_id)
    seen = outcomes(log)
    for who in ("instance", "job"):
        for call, code in REFUSED.items():
            assert seen.get(f"{who} {call}") == code, (who, call, seen.get(f"{who} {call}"), log[-3000:])
    # and the victim's parameter value never reached the script
    assert VICTIM_SECRET.encode() not in log
    # and a parameter outside spotrun's references is read with the instance role (AmazonSSMManagedInstanceCore)
    # but not with the job's session, which names only the job's own references
    assert seen["instance ssm:GetParameter(outside)"] == f"allowed {OUTSIDE_VALUE}", log[-3000:]
    assert seen["job ssm:GetParameter(outside)"] == "AccessDeniedException"
    # and a copy from the job's own object into its output is served (the refusal above is the source's)
    assert seen["job s3:CopyObject(own)"] == "allowed"
    assert seen["instance s3:CopyObject(own)"] == "AccessDenied"
    # and unsigned and unknown-key calls are refused as AWS refuses them
    assert seen["unsigned dynamodb:Scan"] == "MissingAuthenticationTokenException"
    assert seen["unsigned s3:GetObject"] == "AccessDenied"
    assert seen["unknown dynamodb:Scan"] == "UnrecognizedClientException"
    assert seen["unknown s3:GetObject"] == "InvalidAccessKeyId"
    # and the command's environment held none of the control plane's configuration
    for name in ("SPOTRUN_JOBS_TABLE", "SPOTRUN_STATE_MACHINE_ARN", "SPOTRUN_JOB_ACCESS_ROLE_ARN"):
        assert seen[f"env {name}"] == "absent"
    # and nothing of the victim was copied, its stream is still there, and it ended with its own model
    assert (
        s3.list_objects_v2(Bucket=bucket, Prefix=f"{output_prefix(attacker.job_id)}stolen")["KeyCount"] == 0
    )
    streams = runtime.client("logs").describe_log_streams(
        logGroupName=group, logStreamNamePrefix=victim.job_id
    )
    assert [s["logStreamName"] for s in streams["logStreams"]] == [log_stream(victim.job_id, 1)]
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert job.model_sha256 == sha256(direct_model)
