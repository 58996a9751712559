"""``spotrun local up``: the embedded runtime as a long-running local AWS, with a chaos control API beside it."""

from __future__ import annotations

import os
import shlex
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from spotrun.local.control_api import ControlApi, ControlServer
from spotrun.local.control_client import (
    ControlClient,
    LocalState,
    NoLocalRuntime,
    read_state,
    remove_state,
    state_path,
    write_state,
)
from spotrun.local.runtime import LocalRuntime
from spotrun.local.server import FAKE_CREDENTIALS
from spotrun.model.job.record import utc_now
from spotrun.model.layout import MANIFEST_PREFIX
from spotrun.model.simulation.traces import Trace
from spotrun.notifications import Subscription


class AlreadyRunning(RuntimeError):
    """Another ``spotrun local up`` answers for the same working directory."""


def _running_elsewhere(workdir: Path) -> LocalState | None:
    try:
        state = read_state(workdir)
        ControlClient(state, timeout=2.0).status()
    except NoLocalRuntime:
        return None
    return state


@contextmanager
def local_up(
    workdir: Path,
    time_scale: float,
    seed: int = 0,
    on_action: Callable[[str], None] | None = None,
    *,
    trace: Trace | Path | None = None,
    trace_scale: float | None = None,
    trace_pools: Sequence[tuple[str, str]] | None = None,
    notifications: Sequence[Subscription] = (),
) -> Iterator[tuple[LocalRuntime, LocalState]]:
    """Start the runtime and its control API, and write the state file; undo all three on exit.

    Parameters
    ----------
    workdir
        Holds the state file and the instances' directories.
    time_scale
        Real seconds per simulated second.
    seed
        Seeds the spot pools' table.
    on_action
        Told each chaos action done through the control API.
    trace, trace_scale, trace_pools
        A spot trace to drive the pools from, its pace and its pools (:class:`LocalRuntime`'s).
    notifications
        The subscriptions to notify of the jobs' events (``--notify``, :mod:`spotrun.notifications`).

    Yields
    ------
    tuple[LocalRuntime, LocalState]
        The started runtime and what the state file says.

    Raises
    ------
    AlreadyRunning
        When a ``local up`` already answers for ``workdir``.
    spotrun.model.simulation.traces.TraceError, spotrun.local.capacity.trace_pools.TraceSetupError
        When the trace cannot be replayed (before anything starts).
    """
    workdir = Path(workdir).resolve()
    other = _running_elsewhere(workdir)
    if other is not None:
        raise AlreadyRunning(
            f"a local runtime already runs for {workdir} (pid {other.pid}, {other.endpoint_url})"
        )
    started = LocalRuntime(
        workdir,
        time_scale=time_scale,
        seed=seed,
        trace=trace,
        trace_scale=trace_scale,
        trace_pools=trace_pools,
        notifications=notifications,
    )
    with started as runtime:
        server = ControlServer(ControlApi(runtime, on_action))
        try:
            control_url = server.start()
            state = LocalState(
                pid=os.getpid(),
                endpoint_url=runtime.endpoint_url,
                control_url=control_url,
                api_url=runtime.api_url,
                time_scale=time_scale,
                workdir=str(workdir),
                started_at=utc_now(),
                settings=runtime.settings,
            )
            write_state(workdir, state)
            yield runtime, state
        finally:
            remove_state(workdir, os.getpid())
            server.stop()


def connection_help(state: LocalState, state_dir_option: str = "") -> str:
    """What to type to use the running runtime: environment for the AWS CLI, bucket names, chaos commands.

    Parameters
    ----------
    state
        The running runtime's state.
    state_dir_option
        ``--state-dir DIR`` to add to the chaos commands when the state directory is not the default.

    Returns
    -------
    str
        Several lines of plain text.
    """
    settings = state.settings
    env = {
        "AWS_ENDPOINT_URL": state.endpoint_url,
        "AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "AWS_DEFAULT_REGION": settings.region,
    }
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
    option = f" {state_dir_option}" if state_dir_option else ""
    chaos = [
        (f"spotrun local instances{option}", ""),
        (f"spotrun local interrupt INSTANCE_ID{option}", "rebalance, 2-minute warning, termination"),
        (f"spotrun local kill INSTANCE_ID{option}", "silent death"),
        (f"spotrun local exhaust INSTANCE_TYPE ZONE{option}", "no capacity left in a pool"),
    ]
    width = max(len(command) for command, _ in chaos)
    # IAM-authorised as deployed: requests are signed (SigV4, execute-api) with the runtime's user keys.
    sign = (
        f"--aws-sigv4 'aws:amz:{settings.region}:execute-api' "
        f"--user {FAKE_CREDENTIALS['AWS_ACCESS_KEY_ID']}:{FAKE_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}"
    )
    api = (
        [
            f"REST API (IAM: sign with the keys above, as the spotrun CLI does): {state.api_url}   e.g.",
            f"  curl -s {sign} {state.api_url}/jobs",
            f"  curl -s {sign} -X POST {state.api_url}/jobs -H 'Content-Type: application/json' "
            f"-H 'Idempotency-Key: demo-1' -d @manifest.json",
        ]
        if state.api_url
        else []
    )
    return "\n".join(
        [
            "Point the AWS CLI (or any SDK) at it:",
            f"  export {exports}",
            f"jobs bucket: s3://{settings.jobs_bucket}   archive bucket: s3://{settings.archive_bucket}   "
            f"jobs table: {settings.jobs_table}",
            "Submit a job by dropping its manifest:",
            f"  aws s3 cp examples/tiny-regression/manifest.yaml s3://{settings.jobs_bucket}/{MANIFEST_PREFIX}",
            *api,
            "Watch and break things from another terminal:",
            *(f"  {command:<{width}}  # {note}".rstrip(" #") for command, note in chaos),
            f"control API: {state.control_url}   state file: {state_path(Path(state.workdir))}",
        ]
    )


def notification_help(runtime: LocalRuntime) -> str:
    """Who is notified of what, and where e-mails land; empty without subscriptions. No URL is shown (its token)."""
    lines = []
    for index, subscription in enumerate(runtime.notifications, start=1):
        whom = subscription.email if subscription.email is not None else "a webhook"
        jobs = f"jobs named {subscription.jobs}*" if subscription.jobs else "every job"
        kinds = ", ".join(kind.value for kind in subscription.events)
        lines.append(f"  {index}. {whom}: {kinds} of {jobs}")
    if not lines:
        return ""
    mail = any(subscription.email is not None for subscription in runtime.notifications)
    outbox = [f"E-mails are written to {runtime.outbox}/ (one .eml file per message)."] if mail else []
    return "\n".join(["Notifications:", *lines, *outbox])


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while the block runs (main thread only); handlers restored after."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
