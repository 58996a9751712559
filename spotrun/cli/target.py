"""Which API a command talks to: the target options, declared once, and the one function that resolves them.

Every command of the REST API (``submit``, ``status``, ``schedule list``...) is wrapped by :func:`targeted`:
it adds ``--target``, ``--stack``, ``--region`` and ``--workdir`` (also spelled ``--local-workdir``, its only
spelling on ``submit``, whose ``--workdir`` is the job's code directory) after the command's own options (so
``spotrun status --stack X`` reads as it always did) and hands the command one :class:`ApiTarget`.
:func:`api_client` makes it a client: the REST API of the ``spotrun local up`` running in ``--workdir``
(default: the per-user :func:`local_workdir`, so that it is found from any directory; unsigned), else the
deployed stack's (SigV4). Of the API commands, only this module reads the emulator's state file, and it imports
``spotrun.local`` only then: the commands run where the ``local`` extra is not installed.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from spotrun.cli.client import ApiError, SpotrunClient, TargetError, stack_client
from spotrun.cli.output import fail

TargetKind = Literal["local", "aws"]
DEFAULT_STACK = "Spotrun"
WORKDIR_ENV = "SPOTRUN_LOCAL_WORKDIR"
STATE_HOME_ENV = "XDG_STATE_HOME"


def local_workdir(given: Path | None = None) -> Path:
    """The working directory of ``spotrun local up``: ``given`` (``--workdir``, or $SPOTRUN_LOCAL_WORKDIR), else
    the per-user ``$XDG_STATE_HOME/spotrun/local`` (``~/.local/state/spotrun/local`` without it).

    Per user, not per current directory: ``spotrun status`` finds the runtime from wherever it is typed, and
    two users of one machine keep apart. The XDG Base Directory Specification puts such state in
    $XDG_STATE_HOME, ``~/.local/state`` by default.
    """
    if given is not None:
        return given
    state_home = os.environ.get(STATE_HOME_ENV) or str(Path.home() / ".local" / "state")
    return Path(state_home) / "spotrun" / "local"


TargetOpt = Annotated[
    TargetKind | None,
    typer.Option(
        "--target",
        help="local: the running `spotrun local up`; aws: the deployed stack. Default: local when its state "
        "file exists, else aws.",
        show_default=False,
    ),
]
StackOpt = Annotated[
    str, typer.Option("--stack", help="CloudFormation stack of the deployment (aws target).")
]
RegionOpt = Annotated[
    str | None, typer.Option("--region", help="AWS region of the stack (default: the AWS CLI's).")
]
_WORKDIR_HELP = (
    "Working directory of `spotrun local up`, which holds its state file "
    "[default: $XDG_STATE_HOME/spotrun/local, else ~/.local/state/spotrun/local]."
)
WorkdirOpt = Annotated[
    Path | None,
    typer.Option("--workdir", "--local-workdir", envvar=WORKDIR_ENV, help=_WORKDIR_HELP, show_default=False),
]
# On `submit`, --workdir is the job's code directory (as in SkyPilot); the local runtime's is --local-workdir.
LocalWorkdirOpt = Annotated[
    Path | None,
    typer.Option("--local-workdir", envvar=WORKDIR_ENV, help=_WORKDIR_HELP, show_default=False),
]


@dataclass(frozen=True)
class ApiTarget:
    """Where an API command goes, as its options said.

    Parameters
    ----------
    kind
        ``local``, ``aws``, or None: local when a ``local up`` state file exists in ``workdir``, else aws.
    stack
        CloudFormation stack of the deployment (aws).
    region
        Its region; None: the AWS CLI's.
    workdir
        Working directory of ``spotrun local up`` (local); None: :func:`local_workdir`'s default.
    """

    kind: TargetKind | None = None
    stack: str = DEFAULT_STACK
    region: str | None = None
    workdir: Path | None = None


DEFAULT_TARGET = ApiTarget()  # what the options say when none is given


# The option of each field of ApiTarget. A command's signature names them ``target_<field>``, so that no
# parameter of the command itself can collide with them.
_OPTIONS = {"kind": TargetOpt, "stack": StackOpt, "region": RegionOpt, "workdir": WorkdirOpt}


def targeted(command: Callable[..., None]) -> Callable[..., None]:
    """Give an API command the target options, and call it with them as one :class:`ApiTarget` ``target``.

    Typer reads a command's options from its signature, and the options of a group callback would have to
    come before the subcommand; so the options take the place of ``target`` in each command's signature.

    Parameters
    ----------
    command
        A typer command with a parameter ``target: ApiTarget = DEFAULT_TARGET``.

    Returns
    -------
    Callable
        The command for ``app.command()``.
    """
    own = inspect.signature(command, eval_str=True)
    kind = own.parameters["target"].kind
    options = dict(_OPTIONS)
    if "workdir" in own.parameters:  # the command's own --workdir: the target's is --local-workdir only
        options["workdir"] = LocalWorkdirOpt
    added = [
        inspect.Parameter(f"target_{field}", kind, default=getattr(DEFAULT_TARGET, field), annotation=option)
        for field, option in options.items()
    ]
    parameters: list[inspect.Parameter] = []
    for parameter in own.parameters.values():
        parameters += added if parameter.name == "target" else [parameter]

    @functools.wraps(command)
    def run(**given: Any) -> None:
        target = ApiTarget(**{field: given.pop(f"target_{field}") for field in _OPTIONS})
        command(**given, target=target)

    run.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {}  # the signature above carries them, resolved
    return run


def default_target(workdir: Path | None) -> TargetKind:
    """``local`` when a ``spotrun local up`` state file exists in ``workdir`` (:func:`local_workdir`), else ``aws``."""
    from spotrun.local.control_state import state_path

    return "local" if state_path(local_workdir(workdir)).exists() else "aws"


def local_client(workdir: Path | None) -> SpotrunClient:
    """An unsigned client of the REST API of the ``spotrun local up`` started in ``workdir``.

    Raises
    ------
    TargetError
        No ``local up`` state file there, or its runtime serves no REST API.
    """
    from spotrun.local.control_state import NoLocalRuntime, read_state

    try:
        state = read_state(local_workdir(workdir))
    except NoLocalRuntime as exc:
        raise TargetError(str(exc)) from None
    if not state.api_url:
        raise TargetError(
            f"the local runtime of {state.workdir} serves no REST API (no api_url in its state)"
        )
    return SpotrunClient(state.api_url)


def resolve_client(target: ApiTarget) -> SpotrunClient:
    """The client of ``target``: the local runtime's API, or the deployed stack's.

    Raises
    ------
    TargetError
        When that API cannot be found.
    """
    kind = target.kind or default_target(target.workdir)
    return local_client(target.workdir) if kind == "local" else stack_client(target.stack, target.region)


@contextmanager
def api_client(target: ApiTarget) -> Iterator[SpotrunClient]:
    """The client of ``target``; target and API errors end the command with their message and exit code 1."""
    try:
        yield resolve_client(target)
    except TargetError as exc:
        raise fail(exc) from None
    except ApiError as exc:
        message = exc.message if exc.status == 0 else f"{exc.message} (HTTP {exc.status})"
        raise fail(message, errors=exc.errors) from None
