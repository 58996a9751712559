"""The REST API client: SigV4 signing, error mapping, target resolution, and the schedule commands."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest
from botocore.credentials import Credentials
from typer.testing import CliRunner

from spotrun.aws.settings import Settings
from spotrun.cli.app import app
from spotrun.cli.client import ApiError, SpotrunClient, TargetError
from spotrun.cli.target import ApiTarget, default_target, resolve_client
from spotrun.local.control_client import LocalState, write_state
from spotrun.local.server import FAKE_CREDENTIALS
from spotrun.model.job.record import ManifestSource, new_job, utc_now

runner = CliRunner()
FAKE = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token="session-token")
SCHEDULED = {
    "name": "nightly",
    "training": {"command": ["python", "train.py"]},
    "schedule": {"expression": "rate(1 day)"},
}


class FakeApi:
    """An HTTP server answering each (method, path) with a canned (status, body); it records every request."""

    def __init__(self, answers: dict[tuple[str, str], tuple[int, Any]]):
        self.answers = answers
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.seen.append((self.command, self.path, dict(self.headers.items()), body))
                status, out = fake.answers.get(
                    (self.command, urlsplit(self.path).path), (404, {"message": "?"})
                )
                raw = out if isinstance(out, bytes) else json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def do_DELETE(self) -> None:
                self._answer()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    api = FakeApi({})
    thread = threading.Thread(target=api.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()


def local_workdir(tmp_path: Path, api_url: str | None) -> Path:
    state = LocalState(
        pid=os.getpid(),
        endpoint_url="http://127.0.0.1:1",
        control_url="http://127.0.0.1:1",
        api_url=api_url,
        time_scale=1.0,
        workdir=str(tmp_path),
        started_at=utc_now(),
        settings=Settings(),
    )
    write_state(tmp_path, state)
    return tmp_path


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def test_an_aws_client_signs_each_request_with_sigv4_for_execute_api() -> None:
    # Given a client of a deployed API, with fake credentials
    client = SpotrunClient("https://abc.execute-api.eu-west-1.amazonaws.com/prod", FAKE, region="eu-west-1")
    # When a request is prepared
    request = client.prepare("GET", "/jobs", query={"status": "FAILED", "limit": 5})
    # Then it carries a SigV4 signature for execute-api in eu-west-1 that a verifier recomputes
    headers = {k.lower(): v for k, v in request.headers.items()}
    headers.setdefault("host", "abc.execute-api.eu-west-1.amazonaws.com")  # urllib sends it from the URL
    amz_date = headers["x-amz-date"]
    assert headers["x-amz-security-token"] == "session-token"
    scope = f"{amz_date[:8]}/eu-west-1/execute-api/aws4_request"
    authorization = headers["authorization"]
    assert authorization.startswith(f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{scope}, SignedHeaders=")
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"host", "x-amz-date", "x-amz-security-token"} <= set(signed)
    canonical = "\n".join(
        [
            "GET",
            "/prod/jobs",
            "limit=5&status=FAILED",
            *(f"{name}:{headers[name].strip()}" for name in signed),
            "",
            ";".join(signed),
            hashlib.sha256(b"").hexdigest(),
        ]
    )
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = _hmac(("AWS4" + FAKE.secret_key).encode(), amz_date[:8])
    for part in ("eu-west-1", "execute-api", "aws4_request"):
        key = _hmac(key, part)
    assert authorization.endswith("Signature=" + hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest())
    assert FAKE.secret_key not in repr(client)


def test_a_local_client_signs_as_the_runtimes_user(fake_api: FakeApi, tmp_path: Path) -> None:
    # Given a `local up` state file naming the fake API
    fake_api.answers[("GET", "/jobs")] = (200, {"jobs": [], "next_token": None})
    client = resolve_client(ApiTarget(workdir=local_workdir(tmp_path, fake_api.url)))
    # When jobs are listed
    answer = client.list_jobs(status="FAILED")
    # Then the request went signed (SigV4, execute-api) with the runtime's user keys, as every route of the
    # deployed API is IAM-authorised, with its query; and the JSON came back parsed
    assert answer == {"jobs": [], "next_token": None}
    method, path, headers, _ = fake_api.seen[0]
    assert (method, path) == ("GET", "/jobs?status=FAILED")
    key = FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"]
    assert headers["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={key}/")
    assert f"/{Settings().region}/execute-api/aws4_request" in headers["Authorization"]
    assert "X-Amz-Date" in headers


@pytest.mark.parametrize(
    ("status", "body", "message", "errors"),
    [
        (
            422,
            {"message": "invalid manifest", "errors": ["training.command: required"]},
            "invalid manifest",
            1,
        ),
        (404, {"message": "no job x"}, "no job x", 0),
        (502, b"<html>bad gateway</html>", "HTTP 502 Bad Gateway", 0),
    ],
)
def test_api_errors_carry_status_message_and_errors(
    fake_api: FakeApi, status: int, body: Any, message: str, errors: int
) -> None:
    # Given an API answering an error
    fake_api.answers[("GET", "/jobs/x")] = (status, body)
    # When the job is asked
    with pytest.raises(ApiError) as raised:
        SpotrunClient(fake_api.url).get_job("x")
    # Then one exception carries the status, the message and every problem
    assert (raised.value.status, raised.value.message, len(raised.value.errors)) == (status, message, errors)


def test_the_target_is_local_only_when_a_state_file_exists(tmp_path: Path) -> None:
    # Given a working directory without, then with, a state file that names no REST API
    before = default_target(tmp_path)
    local_workdir(tmp_path, None)
    # When the target is resolved
    after = default_target(tmp_path)
    # Then it is aws, then local, and a local runtime without an API is a clear error
    assert (before, after) == ("aws", "local")
    with pytest.raises(TargetError, match="serves no REST API"):
        resolve_client(ApiTarget(kind="local", workdir=tmp_path))


def test_no_target_reachable_is_one_line_and_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no `local up` and no AWS credentials
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # When jobs are listed
    result = runner.invoke(app, ["list", "--state-dir", str(tmp_path), "--region", "us-east-1"])
    # Then one line on stderr says so
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "no AWS credentials" in result.stderr


def test_schedule_commands_call_the_schedules_routes(fake_api: FakeApi, tmp_path: Path) -> None:
    # Given a fake API with schedules, and a manifest with a schedule block
    fake_api.answers[("POST", "/schedules")] = (201, {"name": "nightly", "expression": "rate(1 day)"})
    fake_api.answers[("GET", "/schedules")] = (200, {"schedules": [{"name": "nightly", "state": "ENABLED"}]})
    fake_api.answers[("DELETE", "/schedules/nightly")] = (204, b"")
    fake_api.answers[("GET", "/schedules/nightly/runs")] = (
        200,
        {"name": "nightly", "runs": [{"job_id": "j-1"}]},
    )
    workdir = local_workdir(tmp_path / "local", fake_api.url)
    file = tmp_path / "nightly.json"
    file.write_text(json.dumps(SCHEDULED))
    # When a schedule is created, listed, and deleted
    created = runner.invoke(app, ["schedule", "create", str(file), "--state-dir", str(workdir), "--json"])
    listed = runner.invoke(app, ["schedule", "list", "--state-dir", str(workdir)])
    runs = runner.invoke(app, ["schedule", "runs", "nightly", "--state-dir", str(workdir)])
    deleted = runner.invoke(app, ["schedule", "delete", "nightly", "--state-dir", str(workdir), "--json"])
    # Then each called its route: the manifest as the body, the table and messages for people
    assert [r.exit_code for r in (created, listed, runs, deleted)] == [0, 0, 0, 0], (
        created.stderr + listed.stderr
    )
    assert json.loads(created.stdout)["name"] == "nightly"
    assert fake_api.seen[0][3]["schedule"]["expression"] == "rate(1 day)"
    assert "ENABLED" in listed.stdout
    assert "j-1" in runs.stdout
    assert json.loads(deleted.stdout) == {"name": "nightly", "deleted": True}
    assert [(m, p) for m, p, _, _ in fake_api.seen] == [
        ("POST", "/schedules"),
        ("GET", "/schedules"),
        ("GET", "/schedules/nightly/runs"),
        ("DELETE", "/schedules/nightly"),
    ]


def test_an_api_refusal_prints_its_message_and_each_problem(fake_api: FakeApi, tmp_path: Path) -> None:
    # Given an API refusing the cancel of an ended job
    fake_api.answers[("DELETE", "/jobs/done-1")] = (409, {"message": "job done-1 has ended", "errors": ["x"]})
    workdir = local_workdir(tmp_path, fake_api.url)
    # When it is cancelled
    result = runner.invoke(app, ["cancel", "done-1", "--state-dir", str(workdir), "--json"])
    # Then exit 1, the message and its problems on stderr, and with --json the same as the one object on stdout
    assert result.exit_code == 1
    assert "job done-1 has ended (HTTP 409)" in result.stderr
    assert "  - x" in result.stderr
    assert json.loads(result.stdout) == {
        "error": {"message": "job done-1 has ended (HTTP 409)", "errors": ["x"], "exit_code": 1}
    }


class FakeSession:
    """A boto3 session whose CloudFormation knows one stack, whose ``ApiUrl`` output is ``api_url``."""

    api_url: ClassVar[str] = ""
    asked: ClassVar[list[tuple[str, str]]] = []  # (region, stack) of every DescribeStacks

    def __init__(self, region_name: str | None = None):
        self.region_name = region_name

    def get_credentials(self) -> Credentials:
        return FAKE

    def client(self, service: str, region_name: str) -> Any:
        assert service == "cloudformation"
        session = self

        class CloudFormation:
            def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 - boto3's name
                FakeSession.asked.append((region_name, StackName))
                outputs = [{"OutputKey": "ApiUrl", "OutputValue": session.api_url}]
                return {"Stacks": [{"StackName": StackName, "Outputs": outputs}]}

        return CloudFormation()


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "j-1"],
        ["schedule", "list"],
    ],
)
def test_the_target_stack_and_region_options_of_a_command_choose_the_api_it_calls(
    fake_api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    # Given a deployed stack "Staging" in eu-west-1 whose ApiUrl is the fake API, and a `local up` elsewhere
    workdir = local_workdir(tmp_path, "http://127.0.0.1:1")
    job = new_job("j-1", "tiny", ManifestSource(kind="api"), None, datetime(2026, 12, 1, tzinfo=UTC))
    fake_api.answers[("GET", "/jobs/j-1")] = (200, job.model_dump(mode="json"))
    fake_api.answers[("GET", "/jobs/j-1/telemetry")] = (200, {"metrics": {}, "gpu": []})
    fake_api.answers[("GET", "/schedules")] = (200, {"schedules": []})
    monkeypatch.setattr(FakeSession, "api_url", fake_api.url)
    monkeypatch.setattr(FakeSession, "asked", [])
    monkeypatch.setattr("spotrun.cli.client.boto3.session.Session", FakeSession)
    # When the command is given the aws target, the stack and the region after its own arguments
    options = ["--target", "aws", "--stack", "Staging", "--region", "eu-west-1", "--state-dir", str(workdir)]
    result = runner.invoke(app, [*argv, *options, "--json"])
    # Then that stack's output was read in that region, and the request went there, signed for that region
    assert result.exit_code == 0, result.stderr
    assert FakeSession.asked == [("eu-west-1", "Staging")]
    _, _, headers, _ = fake_api.seen[0]
    assert "/eu-west-1/execute-api/aws4_request" in headers["Authorization"]


def test_the_workdir_option_of_a_command_chooses_the_local_runtime_it_calls(
    fake_api: FakeApi, tmp_path: Path
) -> None:
    # Given a `local up` state file naming the fake API, in a working directory other than the default
    fake_api.answers[("GET", "/jobs")] = (200, {"jobs": [], "next_token": None})
    chosen = local_workdir(tmp_path / "chosen", fake_api.url)
    # When jobs are listed with --workdir
    result = runner.invoke(app, ["list", "--state-dir", str(chosen), "--target", "local", "--json"])
    # Then the fake API of that state directory answered, the request signed
    assert result.exit_code == 0, result.stderr
    assert [(m, p) for m, p, _, _ in fake_api.seen] == [("GET", "/jobs?limit=20")]
    assert "/execute-api/aws4_request" in fake_api.seen[0][2]["Authorization"]
