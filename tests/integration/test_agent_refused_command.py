"""``spotrun-agent run`` with a command document it must refuse: nothing runs, nothing is made, it says why."""

from __future__ import annotations

import json
from typing import Any

from spotrun.agent.step_runner import EXIT_BAD_COMMAND
from tests.integration.test_agent import BUCKET, TOKEN, command, manifest
from tests.integration.test_agent_notice_cli import agent, instance

__all__ = ["instance"]  # the fixture, used by name


def put_raw(s3: Any, document: dict[str, Any]) -> str:
    key = "jobs/tiny-0123456789ab/agent/attempt-001-stage.json"
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(document).encode())
    return f"s3://{BUCKET}/{key}"


def test_a_command_whose_job_id_leaves_the_nvme_root_is_refused_before_any_directory(instance, tmp_path):
    # Given a stage command whose job id climbs out of the NVMe root
    s3, env = instance
    document = json.loads(command("stage", manifest()).model_dump_json())
    document["job_id"] = "../../../x"
    nvme = tmp_path / "a" / "b" / "nvme"
    env = {**env, "SPOTRUN_NVME_ROOT": str(nvme)}

    # When the agent is run with it
    process = agent(put_raw(s3, document), env)
    _, stderr = process.communicate(timeout=60)

    # Then it refuses, says which field, keeps the token out of its log, and creates nothing anywhere
    assert process.returncode == EXIT_BAD_COMMAND
    assert "refused the agent command" in stderr
    assert "job_id: Value error, '../../../x' is not a spotrun job id" in stderr
    assert TOKEN not in stderr
    assert list(tmp_path.rglob("*")) == []


def test_a_refused_command_never_logs_the_values_it_carries(instance, tmp_path):
    # Given a command whose task token is where a number should be
    s3, env = instance
    document = json.loads(command("stage", manifest()).model_dump_json())
    document["attempt"] = TOKEN
    env = {**env, "SPOTRUN_NVME_ROOT": str(tmp_path / "nvme")}

    # When
    process = agent(put_raw(s3, document), env)
    _, stderr = process.communicate(timeout=60)

    # Then the field is named, its value is not
    assert process.returncode == EXIT_BAD_COMMAND
    assert "attempt:" in stderr
    assert TOKEN not in stderr
