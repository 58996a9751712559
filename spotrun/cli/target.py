"""Which API a command talks to: the target options, declared once, and the one function that resolves them.

Every command of the REST API (``submit``, ``status``, ``schedule list``...) is wrapped by :func:`targeted`:
it adds ``--target``, ``--stack``, ``--region`` and ``--state-dir`` after the command's own options (so
``spotrun status --stack X`` reads as it always did) and hands the command one :class:`ApiTarget`.
:func:`api_client` makes it a client: the REST API of the ``spotrun local up`` whose state directory is
``--state-dir`` (default: the per-user :func:`local_state_dir`, so that it is found from any directory), else
the deployed stack's; both signed with SigV4. Of the API commands, only this module reads the emulator's state
file, and it imports ``spotrun.local`` only then: the commands run where the ``local`` extra is not installed.

One name per meaning: ``--workdir`` is a job's code directory (``submit``, ``plan``), ``--state-dir`` the local
runtime's state directory (every command that finds or starts it). The state directory's former names
(``--workdir`` where it is not the code, ``--local-workdir``) still work, say that they are deprecated, and are
refused beside ``--state-dir``: :func:`with_state_dir`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from botocore.credentials import Credentials
from rich.text import Text
from typer._click.core import ParameterSource  # Typer vendors its own click
from typer._click.globals import get_current_context

from spotrun.cli.client import ApiError, SpotrunClient, TargetError, stack_client
from spotrun.cli.display.output import error_console, fail

TargetKind = Literal["local", "aws"]
DEFAULT_STACK = "Spotrun"
STATE_DIR_ENV = "SPOTRUN_LOCAL_STATE_DIR"
STATE_HOME_ENV = "XDG_STATE_HOME"


def local_state_dir(given: Path | None = None) -> Path:
    """The state directory of ``spotrun local up``: ``given`` (``--state-dir``, or $SPOTRUN_LOCAL_STATE_DIR), else
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
STATE_DIR_FLAG = "--state-dir"
_STATE_DIR_HELP = (
    "State directory of `spotrun local up` (its state file, instances and logs). Default: "
    "$XDG_STATE_HOME/spotrun/local, else ~/.local/state/spotrun/local."
)
StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        STATE_DIR_FLAG, envvar=STATE_DIR_ENV, metavar="DIR", help=_STATE_DIR_HELP, show_default=False
    ),
]
# The state directory's former names, by parameter name: each still works and says it is deprecated.
# --workdir is left out of a command whose own --workdir is a code directory (submit, plan).
DEPRECATED_STATE_DIR_FLAGS = {"workdir": "--workdir", "local_workdir": "--local-workdir"}


def _deprecated_option(flag: str) -> Any:
    return Annotated[Path | None, typer.Option(flag, metavar="DIR", hidden=True, show_default=False)]


def state_dir_of(
    state_dir: Path | None, from_command_line: bool, deprecated: dict[str, Path | None]
) -> Path | None:
    """The state directory a command was given: ``--state-dir`` (or its environment variable), or one of its
    deprecated names, which says on stderr that it is deprecated.

    Parameters
    ----------
    state_dir
        The value of ``--state-dir`` (or $SPOTRUN_LOCAL_STATE_DIR).
    from_command_line
        Whether ``--state-dir`` itself was typed (not read from the environment).
    deprecated
        The value of each deprecated flag, by flag (None: not given).

    Returns
    -------
    Path or None
        The directory; None: :func:`local_state_dir`'s default.

    Raises
    ------
    typer.Exit
        Exit code 2 when two of the names are given: one would be ignored.
    """
    given = {flag: value for flag, value in deprecated.items() if value is not None}
    if from_command_line and state_dir is not None:
        given = {STATE_DIR_FLAG: state_dir, **given}
    if len(given) > 1:
        raise fail(
            f"{' and '.join(given)} both name the local runtime's state directory: give only {STATE_DIR_FLAG}",
            code=2,
        )
    for flag, value in given.items():
        if flag != STATE_DIR_FLAG:
            # A deprecated name still works (scripts keep running) and says so, with the name to use instead.
            error_console().print(
                Text.assemble(
                    ("warning: ", "yellow"),
                    f"{flag} for the local runtime's state directory is deprecated: use {STATE_DIR_FLAG} {value}",
                )
            )
            return value
    return state_dir


def _typed(name: str) -> bool:
    """Whether the option of parameter ``name`` of the running command was typed on its command line."""
    context = get_current_context(silent=True)
    return context is not None and context.get_parameter_source(name) is ParameterSource.COMMANDLINE


def with_state_dir(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command whose parameter ``state_dir`` is :data:`StateDirOpt` the deprecated names of that option.

    Each deprecated flag not taken by the command's own options becomes a hidden parameter; the command is
    called with ``state_dir`` as :func:`state_dir_of` resolves it.

    Parameters
    ----------
    command
        A typer command with a parameter ``state_dir: StateDirOpt = None``.

    Returns
    -------
    Callable
        The command for ``app.command()``.
    """
    own = inspect.signature(command, eval_str=True)
    aliases = {
        f"_deprecated_{name}": flag
        for name, flag in DEPRECATED_STATE_DIR_FLAGS.items()
        if name not in own.parameters
    }
    kind = own.parameters["state_dir"].kind
    parameters: list[inspect.Parameter] = []
    for parameter in own.parameters.values():
        parameters.append(parameter)
        if parameter.name == "state_dir":
            parameters += [
                inspect.Parameter(name, kind, default=None, annotation=_deprecated_option(flag))
                for name, flag in aliases.items()
            ]

    @functools.wraps(command)
    def run(**given: Any) -> None:
        deprecated = {flag: given.pop(name) for name, flag in aliases.items()}
        given["state_dir"] = state_dir_of(given["state_dir"], _typed("state_dir"), deprecated)
        command(**given)

    run.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {}  # the signature above carries them, resolved
    return run


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
        State directory of ``spotrun local up`` (local, ``--state-dir``); None: :func:`local_state_dir`'s default.
    """

    kind: TargetKind | None = None
    stack: str = DEFAULT_STACK
    region: str | None = None
    workdir: Path | None = None


DEFAULT_TARGET = ApiTarget()  # what the options say when none is given


# The option of each field of ApiTarget. A command's signature names them ``target_<field>``, so that no
# parameter of the command itself can collide with them.
_OPTIONS = {"kind": TargetOpt, "stack": StackOpt, "region": RegionOpt, "workdir": StateDirOpt}


def targeted(command: Callable[..., None]) -> Callable[..., None]:
    """Give an API command the target options, and call it with them as one :class:`ApiTarget` ``target``.

    Typer reads a command's options from its signature, and the options of a group callback would have to
    come before the subcommand; so the options take the place of ``target`` in each command's signature. The
    state directory's deprecated names come with them (:func:`with_state_dir`), but for ``--workdir`` on a
    command whose own ``--workdir`` is its code.

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
    added = [
        inspect.Parameter(f"target_{field}", kind, default=getattr(DEFAULT_TARGET, field), annotation=option)
        for field, option in _OPTIONS.items()
    ]
    aliases = {
        f"target_deprecated_{name}": flag
        for name, flag in DEPRECATED_STATE_DIR_FLAGS.items()
        if name not in own.parameters
    }
    added += [
        inspect.Parameter(name, kind, default=None, annotation=_deprecated_option(flag))
        for name, flag in aliases.items()
    ]
    parameters: list[inspect.Parameter] = []
    for parameter in own.parameters.values():
        parameters += added if parameter.name == "target" else [parameter]

    @functools.wraps(command)
    def run(**given: Any) -> None:
        deprecated = {flag: given.pop(name) for name, flag in aliases.items()}
        target = ApiTarget(**{field: given.pop(f"target_{field}") for field in _OPTIONS})
        state_dir = state_dir_of(target.workdir, _typed("target_workdir"), deprecated)
        command(**given, target=dataclasses.replace(target, workdir=state_dir))

    run.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {}  # the signature above carries them, resolved
    return run


def default_target(workdir: Path | None) -> TargetKind:
    """``local`` when a ``spotrun local up`` state file is in ``workdir`` (:func:`local_state_dir`), else ``aws``."""
    from spotrun.local.control_client import state_path

    return "local" if state_path(local_state_dir(workdir)).exists() else "aws"


def local_client(workdir: Path | None) -> SpotrunClient:
    """A client of the REST API of the ``spotrun local up`` whose state directory is ``workdir``, signing as its
    user (:func:`local_api_client`).

    Raises
    ------
    TargetError
        No ``local up`` state file there, or its runtime serves no REST API.
    """
    from spotrun.local.control_client import NoLocalRuntime, read_state

    try:
        state = read_state(local_state_dir(workdir))
    except NoLocalRuntime as exc:
        raise TargetError(str(exc)) from None
    if not state.api_url:
        raise TargetError(
            f"the local runtime of {state.workdir} serves no REST API (no api_url in its state)"
        )
    return local_api_client(state.api_url, state.settings.region)


def local_api_client(api_url: str, region: str) -> SpotrunClient:
    """A client of a local runtime's REST API, signing each request as its user does: SigV4 for ``execute-api``
    with the runtime's keys (those ``spotrun local up`` prints for the AWS CLI).

    Every route of the deployed API is IAM-authorised (API Gateway answers an unsigned call 403 "Missing
    Authentication Token":
    https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-control-access-using-iam-policies-to-invoke-api.html),
    and the local stand-in judges requests as it does; the CLI signs the same way for both targets.
    """
    from spotrun.local.api.auth import local_user_credentials

    return SpotrunClient(api_url, credentials=Credentials(*local_user_credentials()), region=region)


def resolve_client(target: ApiTarget) -> SpotrunClient:
    """The client of ``target``: the local runtime's API, or the deployed stack's.

    Raises
    ------
    TargetError
        When that API cannot be found; when the target was chosen because no ``local up`` state file was found,
        the message names where it was looked for.
    """
    kind = target.kind or default_target(target.workdir)
    if kind == "local":
        return local_client(target.workdir)
    try:
        return stack_client(target.stack, target.region)
    except TargetError as exc:
        if target.kind is not None:
            raise
        from spotrun.local.control_client import state_path

        # Chosen because no state file was found: a wrong state directory must not read as an AWS problem only.
        looked = state_path(local_state_dir(target.workdir))
        raise TargetError(
            f"no `spotrun local up` state file at {looked} (for a local runtime started elsewhere: "
            f"{STATE_DIR_FLAG} DIR or ${STATE_DIR_ENV}), so the aws target was tried: {exc}"
        ) from None


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
