"""The train step on a node of a multi-node job: torchrun's environment, torch elastic's restarts only, the node's
checkpoint part uploaded, and NodeDone reported by a node other than node 0."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.model import layout
from spotrun.model.agent_protocol.command import TRAINING_FAILED, NodeGroup
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.test_agent import command, context, failure_of, success_of

JOB = "j-000000000001"

# Stands in for torchrun: records its environment, counts its runs, writes node 1's part of step 10, then exits
# with the status its argument names.
FAKE_TORCHRUN = """#!{python}
import json, os, pathlib, sys
out = pathlib.Path(os.environ["SPOTRUN_OUTPUT_DIR"])
runs = out / "runs"
runs.write_text(str(int(runs.read_text()) + 1 if runs.exists() else 1))
names = [n for n in os.environ if n.startswith("PET_") or n in ("SPOTRUN_NODE_RANK", "SPOTRUN_NODES")]
(out / "env.json").write_text(json.dumps({{n: os.environ[n] for n in names}}))
step = pathlib.Path(os.environ["SPOTRUN_CHECKPOINT_DIR"]) / "step-000000000010"
step.mkdir(exist_ok=True)
(step / "node-001.json").write_text(json.dumps({{"node": 1, "step": 10}}))
sys.exit(int(sys.argv[1]))
"""


def fake_torchrun(directory: Path) -> Path:
    path = directory / "bin" / "torchrun"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE_TORCHRUN.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def node_command(torchrun: Path, node: int, exit_code: int, restarts: int = 0) -> Any:
    document = {
        "name": "pair",
        "resources": {"nodes": 2},
        "training": {
            "command": [str(torchrun), str(exit_code)],
            "restarts_on_error": restarts,
            "checkpoint": {"interval_steps": 10, "keep_last": 2},
        },
        "outputs": {"model": "model.bin"},
    }
    group = NodeGroup(nodes=2, node=node, rendezvous_host="127.0.0.1", rendezvous_id="pair-a1")
    return command("train", document, group=group)


def keys(s3: Any, prefix: str) -> list[str]:
    return [entry["Key"] for entry in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def test_node_1_runs_torchrun_in_its_group_uploads_its_part_and_reports_node_done(s3, tmp_path):
    # Given node 1 of a 2-node job, whose private address is 127.0.0.2, and a torchrun that succeeds
    nvme = tmp_path / "nvme"
    ctx = context(s3, nvme)
    ctx.local_ipv4 = lambda: "127.0.0.2"
    train = node_command(fake_torchrun(tmp_path), node=1, exit_code=0)

    # When the train step runs
    assert execute(train, ctx) == EXIT_REPORTED

    # Then torchrun joined the group at node 0's endpoint with node 1's own address, hosting nothing
    output = layout.NvmeLayout(nvme, JOB).output_dir
    env = json.loads((output / "env.json").read_text())
    assert env["PET_NNODES"] == "2"
    assert env["PET_RDZV_ENDPOINT"] == "127.0.0.1:29400"
    assert env["PET_RDZV_ID"] == "pair-a1"
    assert (env["PET_LOCAL_ADDR"], env["PET_RDZV_CONF"]) == ("127.0.0.2", "is_host=false")
    assert (env["SPOTRUN_NODE_RANK"], env["SPOTRUN_NODES"]) == ("1", "2")

    # And its part of step 10 is uploaded, not committed (node 0's part never came)
    assert layout.part_marker_key(JOB, 10, 1) in keys(s3, layout.checkpoint_prefix(JOB, 10))
    assert layout.commit_marker_key(JOB, 10) not in keys(s3, layout.checkpoint_prefix(JOB, 10))

    # And it reported NodeDone, and uploaded no outputs (node 0 does)
    done = success_of(ctx)
    assert set(done) == {"node", "seconds"}
    assert done["node"] == 1
    assert keys(s3, layout.output_prefix(JOB)) == []


def test_a_groups_failing_command_is_restarted_by_torch_elastic_only(s3, tmp_path):
    # Given node 0 of a 2-node job with training.restarts_on_error 2, and a torchrun that fails
    nvme = tmp_path / "nvme"
    ctx = context(s3, nvme)
    train = node_command(fake_torchrun(tmp_path), node=0, exit_code=3, restarts=2)

    # When the train step runs
    assert execute(train, ctx) == EXIT_REPORTED

    # Then torchrun was told to restart twice, the agent ran it once, and the step failed
    output = layout.NvmeLayout(nvme, JOB).output_dir
    env = json.loads((output / "env.json").read_text())
    assert (env["PET_MAX_RESTARTS"], env["PET_LOCAL_ADDR"], env["PET_RDZV_CONF"]) == (
        "2",
        "127.0.0.1",
        "is_host=true",
    )
    assert (output / "runs").read_text() == "1"
    error, cause = failure_of(ctx)
    assert error == TRAINING_FAILED
    assert cause.exit_code == 3


def test_the_stage_step_reports_node_done_on_node_1_and_the_stage_result_on_node_0(s3, tmp_path):
    # Given the stage commands of both nodes of a 2-node job
    torchrun = fake_torchrun(tmp_path)
    reports = {}
    for node in (0, 1):
        stage = node_command(torchrun, node=node, exit_code=0).model_copy(update={"step": "stage"})
        ctx = context(s3, tmp_path / f"nvme-{node}")

        # When each stages
        assert execute(stage, ctx) == EXIT_REPORTED
        reports[node] = success_of(ctx)

    # Then node 1 says it is done, and node 0 reports what was staged
    assert set(reports[1]) == {"node", "seconds"}
    assert reports[1]["node"] == 1
    assert reports[0]["files"] == 0
    assert reports[0]["checkpoint_restored"] is None


def test_setup_on_node_1_runs_with_the_groups_environment(s3, tmp_path):
    # Given node 1's stage command, whose training.setup checks torchrun's address and the node's rank
    check = (
        "import os, sys; sys.exit(0 if (os.environ['PET_LOCAL_ADDR'], os.environ['SPOTRUN_NODE_RANK']) "
        "== ('127.0.0.2', '1') else 5)"
    )
    stage = node_command(fake_torchrun(tmp_path), node=1, exit_code=0).model_copy(update={"step": "stage"})
    training = stage.manifest.training.model_copy(update={"setup": [[sys.executable, "-c", check]]})
    stage = stage.model_copy(update={"manifest": stage.manifest.model_copy(update={"training": training})})
    ctx = context(s3, tmp_path / "nvme")
    ctx.local_ipv4 = lambda: "127.0.0.2"

    # When it stages
    assert execute(stage, ctx) == EXIT_REPORTED

    # Then setup succeeded with the group's environment, and node 1 is done
    assert success_of(ctx)["node"] == 1
