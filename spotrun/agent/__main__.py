"""Command line of the agent: ``spotrun-agent run --command-uri s3://bucket/key``, and ``spotrun-agent serve``.

``run`` runs one step in this process. ``serve`` is the instance's resident agent
(:mod:`spotrun.agent.resident_server`): it forks a child per command handed to it, which runs exactly what ``run``
runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from spotrun.agent.imds import ImdsClient
from spotrun.agent.resident_server import RunDirectory, serve
from spotrun.agent.step_runner import (
    EXIT_BAD_COMMAND,
    AgentSettings,
    CommandRefusedError,
    aws_client,
    bootstrap_region,
    build_context,
    execute,
    forward_notice,
    job_s3_session,
    load_command,
)
from spotrun.agent.supervision.notice_relay import install_notice_handler
from spotrun.agent.supervision.spot_notices import Notice
from spotrun.agent.transfer.allocator import keep_transfer_buffers
from spotrun.model.agent_protocol.command import NOTICE_STEP

logger = logging.getLogger("spotrun.agent")


def configure_logging(level: str = "INFO") -> None:
    """Plain, timestamped lines on stderr (SSM Run Command and the emulator capture them)."""
    handler = logging.StreamHandler(sys.stderr)
    # The pid tells apart the steps the resident agent's children run at once, all in the same log.
    formatter = logging.Formatter(
        "%(asctime)sZ %(levelname)s %(name)s [%(process)d %(threadName)s] %(message)s"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # botocore at DEBUG would print signed requests, and the role's session token travels in them; at INFO it only
    # chatters about where it found credentials.
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="spotrun-agent", description="The spotrun instance agent.")
    commands = parser.add_subparsers(dest="action", required=True)
    run = commands.add_parser("run", help="Run the step described by an AgentCommand document in S3.")
    run.add_argument("--command-uri", required=True, help="s3://bucket/key of the AgentCommand JSON.")
    run.add_argument("--log-level", default=os.environ.get("SPOTRUN_AGENT_LOG_LEVEL", "INFO"))
    resident = commands.add_parser(
        "serve",
        help="Be the instance's resident agent: run each command handed to the inbox in a forked child.",
    )
    resident.add_argument(
        "--run-dir",
        type=Path,
        default=RunDirectory().root,
        help="Its inbox, pid file and lock (default: %(default)s).",
    )
    resident.add_argument("--log-level", default=os.environ.get("SPOTRUN_AGENT_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spotrun-agent``; returns the process exit status.

    Exit status of ``run`` (and of each step child of ``serve``): 0 the step's result was reported (for a
    ``notice``: it was handed on, or nothing runs to hand it to); 1 it could not be reported; 2 the command
    document could not be read (nothing can be reported without its report route); 3 the workflow had abandoned
    the task. ``serve`` exits 0 when stopped, 1 when it cannot serve its directory.
    """
    args = parse_args(argv)
    configure_logging(args.log_level)
    # Before any transfer, and in the resident parent before its first fork: its step children inherit it.
    keep_transfer_buffers()
    if args.action == "serve":
        # A notice signal that reaches the parent (not a step) must not end it.
        install_notice_handler()
        level = args.log_level
        return serve(
            RunDirectory(args.run_dir), lambda uri: main(["run", "--command-uri", uri, "--log-level", level])
        )
    # From the start: a notice signal that comes before (or after) the train step must not end the process.
    install_notice_handler()
    settings = AgentSettings.from_env()
    environ = dict(os.environ)
    try:
        region = bootstrap_region(environ, ImdsClient(settings.imds_endpoint, timeout=0.5))
        s3_session = job_s3_session(args.command_uri, settings, region)
        command = load_command(aws_client("s3", region, s3_session), args.command_uri)
    except CommandRefusedError as exc:
        # Nothing of it runs, and no directory is made: its job id, paths or names cannot be trusted. Nothing
        # is reported either (its task token is no more trustworthy); the workflow's heartbeat timeout ends
        # the step, and this line says why.
        logger.error("refused the agent command at %s: %s", args.command_uri, exc)
        return EXIT_BAD_COMMAND
    except Exception as exc:
        logger.error("cannot read the agent command at %s: %s", args.command_uri, exc)
        return EXIT_BAD_COMMAND
    if command.step == NOTICE_STEP:
        return forward_notice(command, settings.nvme_root)
    ctx = build_context(command, settings, environ, s3_session)

    def on_termination(signum: int, frame: FrameType | None) -> None:
        # The instance is shutting down (or the agent is being stopped): handle it as an interruption notice,
        # so the training command checkpoints and the workflow hears Spot.Interrupted rather than nothing.
        ctx.watcher.interrupt(Notice("interruption", f"agent received {signal.Signals(signum).name}"))

    previous = {signum: signal.signal(signum, on_termination) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return execute(command, ctx)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
