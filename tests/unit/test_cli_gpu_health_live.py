"""A job's GPU picture (each node's latest sample, the memory warnings) and what the live view draws of it: a line
per node, the warnings and the latest metrics above the status, the telemetry read at most every few seconds."""

from __future__ import annotations

from rich.console import Console

from spotrun.cli.attach import live_view
from spotrun.cli.client import ApiError
from spotrun.cli.display.gpu_health import TelemetryPoll, latest_node_gpus, memory_high_flags
from spotrun.cli.display.gpu_health_render import live_parts
from spotrun.model.job.attempt import NodeRun
from spotrun.model.job.telemetry import assemble
from tests.unit.gpu_health_world import (
    JOB_ID,
    PARTS,
    FakeClient,
    at,
    attempt,
    interrupted_then_training,
    job,
    sample,
    telemetry_answer,
    view,
)


def test_memory_above_90_percent_is_flagged_from_the_telemetry_when_the_record_missed_it() -> None:
    # Given a record without flags (its samples are refreshed every few minutes) and the telemetry's readings
    plain = job(attempt(1, ended_at=at(300).isoformat(), end_reason="interrupted"), attempt(2))
    telemetry = assemble(PARTS)
    # When the warnings are gathered, then attempt 1's first reading above 90 % is one
    [flag] = memory_high_flags(plain, telemetry)
    assert (flag.attempt, flag.node, flag.gpu, flag.percent, flag.at) == (1, 0, 1, 96.8, at(390))


def test_a_groups_nodes_each_show_their_own_sample() -> None:
    # Given a two-node attempt whose nodes each hold a sample in the record
    nodes = [
        NodeRun(node=0, instance_id="i-0a", started_at=at(100), gpu=sample(4, (90, 1000, None))),
        NodeRun(node=1, instance_id="i-0b", started_at=at(100), gpu=sample(3, (0, 24000, None))),
    ]
    group = job(attempt(1, nodes=[n.model_dump(mode="json") for n in nodes]))
    # When the latest samples are read, then one per node, in node order, node 1's memory high
    found = latest_node_gpus(group, None)
    assert [(n.node, n.instance_id, n.gpus[0].utilization, n.gpus[0].memory_high) for n in found] == [
        (0, "i-0a", 90, False),
        (1, "i-0b", 0, True),
    ]


# ---------------------------------------------------------------------------------------------- live view


def test_the_live_view_shows_a_line_per_node_the_warnings_and_the_latest_metrics_above_the_status() -> None:
    # Given a running job's view and its telemetry
    current = interrupted_then_training(record_sample_age=60)
    telemetry = assemble(PARTS)

    # When the live view is drawn
    console = Console(record=True, width=200)
    console.print(live_view(view(current), ["step 120 loss 0.41"], live_parts(current, telemetry)))
    lines = console.export_text().splitlines()

    # Then under the log tail: node 0's GPUs, the memory warning, the metrics at step 120, then the status line
    assert lines[0] == "--- log tail ---"
    assert lines[2] == f"GPUs node 0 ({at(5):%H:%M:%S}): #0 91 % mem 61.0 %, #1 92 % mem 57.0 %"
    assert lines[3].startswith("GPU memory above 90 %: attempt 1 node 0 GPU 1 at 96.8 %")
    assert lines[4] == "metrics at step 120: accuracy 0.88, loss 0.4123"
    assert lines[5].startswith(f"job {JOB_ID}: TRAINING")


def test_a_high_gpu_reads_high_in_the_live_view() -> None:
    # Given a node whose GPU 1 holds 95 % of its memory
    current = job(attempt(1, gpu=sample(2, (97, 1000, None), (97, 23347, None)).model_dump(mode="json")))
    # When its live lines are drawn (no warning recorded yet), then GPU 1 is flagged on the node's line
    [node_line] = live_parts(current, None)
    assert node_line.plain == f"GPUs node 0 ({at(2):%H:%M:%S}): #0 97 % mem 4.1 %, #1 97 % mem 95.0 % HIGH"
    assert [span.style for span in node_line.spans] == ["bold red"]


def test_the_live_view_reads_the_telemetry_at_most_every_few_seconds_and_keeps_the_last_on_failure() -> None:
    # Given a client whose telemetry answers, and a clock the test moves
    client = FakeClient(view(interrupted_then_training()), telemetry_answer())
    clock = [0.0]
    poll = TelemetryPoll(client, JOB_ID, every=5.0, clock=lambda: clock[0])

    # When the view polls every second for 12 s, the API failing after the first read
    read = [poll.poll()]
    client.answer = ApiError(503, "Service Unavailable")
    for second in range(1, 13):
        clock[0] = float(second)
        read.append(poll.poll())

    # Then the telemetry was read at 0, 5 and 10 s only, and the first answer stayed shown through the failures
    assert client.telemetry_reads == 3
    assert all(r is not None and "loss" in r.metrics for r in read)
