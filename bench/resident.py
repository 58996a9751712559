"""Time from SSM delivery to a step's code running: the resident agent's forked child against a fresh process.

Each measurement runs in a fresh process (``python -m bench.resident --once MODE``) that plays the agent
document's own script (:func:`spotrun.local.instances.agent_programs.instance_agent_script`, as a simulated
instance runs it) on a temporary instance directory, and times from just before the script starts to the
moment the step's code runs. ``resident``: a resident agent (``serve``, warmed as on an instance) is alive,
the script hands it the URI and it forks. ``fresh``: none is, the script starts ``spotrun-agent run``'s
stand-in as a new process.

The step is a probe that does what ``spotrun-agent run`` does before a step's own code: import the agent, make
the job's session and its S3 and Logs clients, the reporter's session and the CloudWatch client (placeholder
credentials, nothing sent), then it records the time. What follows (reading the command document, the
credentials route, the step itself) is the same work either way and is left out. Runs interleave the two modes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REGION = "us-east-1"
URI = "s3://spotrun-jobs-000000000000/jobs/bench-0123456789ab/agent/attempt-001-train.json"
MODES = ("fresh", "resident")


def probe_step(uri: str) -> int:
    """The probe step: the agent's start-up work before a step, then the time it reached the step."""
    import boto3

    import spotrun.agent.__main__  # noqa: F401  (what `spotrun-agent run` imports)
    from spotrun.agent.step_runner import aws_client

    job_session = boto3.session.Session(region_name=REGION)
    aws_client("s3", REGION, job_session)
    aws_client("logs", REGION, job_session)
    boto3.session.Session(region_name=REGION)  # the reporter's
    aws_client("cloudwatch", REGION)
    marker = Path(os.environ["BENCH_RESIDENT_OUT"])
    marker.with_suffix(".tmp").write_text(repr(time.time()))
    marker.with_suffix(".tmp").replace(marker)
    return 0


def _environment(out: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_EC2_METADATA_DISABLED": "true",
        "BENCH_RESIDENT_OUT": str(out),
    }


def once(mode: str) -> dict[str, Any]:
    """One measurement in this process: the seconds from delivery to the probe step running."""
    from spotrun.local.instances.agent_programs import instance_agent_script
    from spotrun.model.agent_protocol.ssm_document import AGENT_COMMAND_VARIABLE

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        run_dir, log, out = root / "run", root / "agent.log", root / "step.time"
        env = _environment(out)
        resident = None
        if mode == "resident":
            resident = subprocess.Popen(
                [sys.executable, "-m", "bench.resident", "--serve", str(run_dir)],
                env=env,
                stdout=log.open("ab"),
                stderr=subprocess.STDOUT,
            )
            while not (run_dir / "agent.pid").exists():
                if resident.poll() is not None:
                    raise RuntimeError(f"the resident agent died: {log.read_text()}")
                time.sleep(0.01)
        script = instance_agent_script(run_dir, log)
        fallback = [sys.executable, "-m", "bench.resident", "--step"]
        started = time.time()
        subprocess.run(
            ["/bin/sh", "-c", script, "sh", *fallback],
            env={**env, AGENT_COMMAND_VARIABLE: URI},
            check=True,
            timeout=120,
        )
        deadline = time.monotonic() + 120
        while not out.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the step never ran: {log.read_text()}")
            time.sleep(0.002)
        reached = float(out.read_text())
        if resident is not None:
            resident.terminate()
            resident.wait(10)
        # Which way the script took: the resident agent logs each child it forks.
        handed_over = "step child" in log.read_text()
        if handed_over != (mode == "resident"):
            raise RuntimeError(f"the script took the wrong way for {mode}: {log.read_text()}")
    return {"mode": mode, "delivery_to_step_seconds": reached - started, "handed_over": handed_over}


def _fresh_run(mode: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.resident", "--once", mode], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s [{min(values):.3f}-{max(values):.3f}]"


def run(runs: int) -> dict[str, Any]:
    """``runs`` interleaved measurements of each mode, each in a fresh process; medians and ranges."""
    measured: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(runs):
        for mode in MODES:
            measured[mode].append(_fresh_run(mode)["delivery_to_step_seconds"])
    fresh, resident = measured["fresh"], measured["resident"]
    saved = statistics.median(fresh) - statistics.median(resident)
    markdown = "\n".join(
        [
            "| agent | delivery → step (median [min-max]) |",
            "| --- | --- |",
            f"| fresh process per step (`spotrun-agent run`, before) | {_cell(fresh)} |",
            f"| resident agent, forked child (after) | {_cell(resident)} |",
            "",
            f"Saved per step: {saved:.2f} s (medians); {runs} interleaved runs of each, each in a fresh process.",
            "The probe step imports the agent and makes the clients a step makes, then records the time.",
        ]
    )
    return {
        "name": "resident",
        "title": "SSM delivery to the step's code running",
        "markdown": markdown,
        "results": {"fresh_seconds": fresh, "resident_seconds": resident, "saved_median_seconds": saved},
    }


def main(argv: list[str] | None = None) -> int:
    """``--once MODE`` (one measurement, one JSON line), ``--serve DIR`` (the resident), ``--step URI``."""
    parser = argparse.ArgumentParser(prog="python -m bench.resident")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--once", choices=MODES)
    group.add_argument("--serve", type=Path)
    group.add_argument("--step")
    group.add_argument("--runs", type=int)
    args = parser.parse_args(argv)
    if args.once:
        print(json.dumps(once(args.once)))
        return 0
    if args.serve:
        import logging

        from spotrun.agent.resident_server import RunDirectory, serve

        logging.basicConfig(level="INFO", stream=sys.stderr)
        return serve(RunDirectory(args.serve), probe_step)
    if args.step:
        return probe_step(args.step)
    print(run(args.runs)["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
