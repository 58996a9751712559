"""interval_steps: auto through the agent's train step: a real script, its measured save, the interval it is told."""

from __future__ import annotations

import sys

from spotrun.agent.reporter import RecordingReporter
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.agent.steps.train import _interval_advisor
from spotrun.agent.supervision.checkpoint_sync import CheckpointSyncer
from spotrun.agent.supervision.interval import choose_interval
from spotrun.control.agent_reports import AgentReport, HeartbeatReport
from spotrun.model import layout
from spotrun.model.job.attempt import CheckpointIntervalUsed
from spotrun.model.job.interruption_rate import PoolRate
from tests.integration.report_sink import ReportSink
from tests.integration.test_agent import BUCKET, command, context, manifest, success_of, write_checkpoint
from tests.integration.test_agent_adapters import reporter

# Every interruption silent, 36 000 an hour: Daly's interval for a 0.2 s save is under half a second, so the
# script is told to checkpoint often within the test (a real pool gives hours).
STORMY = PoolRate(interruptions_per_hour=36_000.0, silent_fraction=1.0, basis="a test pool")

SCRIPT = """
import time
from spotrun import training

run = training.Run.from_env()

def writer(directory):
    time.sleep(0.2)  # what one save costs this script
    (directory / "state").write_text("x")

run.save_checkpoint(1, writer)  # the first save, which the agent measures
step, due = 1, []
deadline = time.monotonic() + 15
while len(due) < 2 and time.monotonic() < deadline:
    step += 1
    time.sleep(0.01)
    if run.checkpoint_due(step):
        run.save_checkpoint(step, writer)
        due.append(step)
run.save_model(lambda path: path.write_text("model"))
print("due saves:", len(due))
"""


def test_the_agent_measures_the_save_tells_the_script_and_heartbeats_the_interval(s3, tmp_path):
    # Given a script under interval_steps: auto, and a train command carrying a stormy pool's rate
    document = manifest(command=[sys.executable, "-c", SCRIPT], checkpoint={"interval_steps": "auto"})
    del document["training"]["code"]
    document["data"]["inputs"] = []
    nvme = tmp_path / "nvme"
    ctx = context(s3, nvme)

    # When the train step runs it
    status = execute(command("train", document, pool_rate=STORMY), ctx)

    # Then the script was told, through the interval file, to checkpoint twice more within seconds
    success_of(ctx)
    job_layout = layout.NvmeLayout(nvme, "j-000000000001")
    assert status == EXIT_REPORTED
    assert "due saves: 2" in job_layout.log_file(1).read_text()
    # and the heartbeats carried the interval computed from the measured save, and why
    assert isinstance(ctx.reporter, RecordingReporter)
    used = ctx.reporter.checkpoint_interval
    assert used is not None
    assert used.save_seconds is not None
    assert used.save_seconds >= 0.2
    assert used.interval_seconds == choose_interval(used.save_seconds, STORMY, 4.0).interval_seconds
    assert "a test pool" in used.why
    assert "outlasts the 2-minute notice" not in used.why
    written = float(job_layout.checkpoint_interval_file(1).read_text())
    assert written == round(used.interval_seconds, 3)


def test_the_api_reporters_heartbeat_carries_the_interval_the_route_reads():
    # Given the agent route and an interval in force
    used = CheckpointIntervalUsed(interval_seconds=900.0, why="daly interval 0.25 h ...", save_seconds=3.0)
    with ReportSink() as sink:
        # When a heartbeat is sent with it, and one without
        api = reporter(sink)
        api.heartbeat(used)
        api.heartbeat()
    # Then the first body carries it as the route's HeartbeatReport reads it; the second is as before
    (_, with_interval), (_, plain) = sink.posts
    parsed = AgentReport.model_validate({**with_interval, "job_id": "j-000000000001"}).root  # the route's ids
    assert isinstance(parsed, HeartbeatReport)
    assert parsed.checkpoint_interval == used
    assert "checkpoint_interval" not in plain


def test_the_manifests_cap_reaches_the_agents_interval(s3, tmp_path):
    # Given an auto manifest capped at 1 minute, on a pool whose interruptions all come with the notice
    document = manifest(checkpoint={"interval_steps": "auto", "max_interval_minutes": 1})
    reliable = PoolRate(interruptions_per_hour=1.0, silent_fraction=0.0, basis="reliable")
    job_layout = layout.NvmeLayout(tmp_path, "j-000000000001")
    job_layout.create()
    advisor = _interval_advisor(command("train", document, pool_rate=reliable), job_layout)
    # When a 5 s save is measured
    assert advisor is not None
    advisor.update(5.0)
    # Then the interval is the cap, and the why says it was capped
    assert advisor.current is not None
    assert advisor.current.interval_seconds == 60.0
    assert "capped" in advisor.current.why


def test_the_syncer_times_each_committed_upload(s3, tmp_path):
    # Given a local checkpoint
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    write_checkpoint(directory, 5, b"state")
    syncer = CheckpointSyncer(s3, BUCKET, "j-000000000001", 1, directory, keep_last=2)
    # When it is committed
    before = syncer.upload_seconds
    committed = syncer.sync()
    # Then the upload's duration is known (none before)
    assert committed is not None
    assert before is None
    assert syncer.upload_seconds is not None
    assert syncer.upload_seconds > 0
