"""The resident agent: one long-lived process per instance that runs each step in a child forked from it.

``spotrun-agent serve`` starts with the instance (a systemd unit the user data writes, ``Restart=always``),
imports the agent and warms what a step needs (:func:`warm`), then waits on its inbox
(``/run/spotrun/inbox``, root only). The SSM document's script hands it a step by publishing a file there that
holds the step's command URI (:func:`spotrun.model.agent_protocol.ssm_document.agent_script`), and wakes it.
For each file it forks a child that runs exactly what ``spotrun-agent run --command-uri URI`` runs and exits
with that status; the step starts in milliseconds instead of paying a fresh interpreter, the imports and
botocore's models.

A child per command keeps what a process per step gave: its own exit status (logged as the parent reaps it),
its own log lines (with its pid), its own notice signal handler and pid file
(:mod:`spotrun.agent.supervision.notice_relay`), its own credentials (the parent resolves none: each child
asks IMDS and the credentials route, as a fresh process did), and no state shared with another job's step
once forked. The parent stays single-threaded (a fork of a threaded process may copy a held lock) and runs
nothing of a command itself: a bad inbox file is logged and dropped, and a child that crashes ends only
itself. A step child survives its parent (the unit's ``KillMode=process``, as the SSM Agent's own unit):
restarting the resident agent never kills a running step.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotrun.agent.supervision.notice_relay import process_start_time
from spotrun.model.layout import AGENT_INBOX, AGENT_PID_FILE, AGENT_RUN_DIR, TEMP_PREFIX

logger = logging.getLogger(__name__)

# Sent by the document's script once a command is in the inbox. Its default action is to ignore it, so a pid
# file that named the wrong process could never end that process.
WAKE_SIGNAL = signal.SIGWINCH
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The parent blocks these and takes them one at a time with sigtimedwait: no handler ever runs between a
# fork and its bookkeeping.
WAITED_SIGNALS = frozenset({signal.SIGCHLD, WAKE_SIGNAL, *STOP_SIGNALS})
# The inbox is also read this often without a wake-up (a wake-up can be lost: sent between two reads).
POLL_SECONDS = 1.0
MAX_COMMAND_BYTES = 4096
EXIT_STEP_CRASHED = 70  # EX_SOFTWARE: the child raised out of the step instead of returning a status
EXIT_NOT_SERVING = 1
CLAIMED_PREFIX = f"{TEMP_PREFIX}claimed-"
# The clients a step makes (S3 and its live log with the job's credentials, CloudWatch metrics, the secrets of
# training.secrets): their models are loaded once, here, instead of by every step.
STEP_SERVICES = ("s3", "logs", "cloudwatch", "secretsmanager", "ssm")

StepRunner = Callable[[str], int]


class BadCommandFileError(ValueError):
    """An inbox file that does not hold one command URI: dropped, nothing runs."""


@dataclass(frozen=True)
class RunDirectory:
    """The resident agent's runtime directory: its inbox, pid file and lock.

    Attributes
    ----------
    root
        :data:`spotrun.model.layout.AGENT_RUN_DIR` on an instance; the simulated instance's own in the emulator.
    """

    root: Path = Path(AGENT_RUN_DIR)

    @property
    def inbox(self) -> Path:
        """Where each command arrives as a file holding its URI."""
        return self.root / AGENT_INBOX

    @property
    def pid_file(self) -> Path:
        """``"<pid> <start time>"`` of the serving parent, while it serves."""
        return self.root / AGENT_PID_FILE

    @property
    def lock_file(self) -> Path:
        """Held (flock) by the serving parent: one resident agent per directory."""
        return self.root / "agent.lock"

    def prepare(self) -> None:
        """Make the directory and its inbox (0700) and check that nobody else can write them.

        Raises
        ------
        PermissionError
            When either is not this user's alone (another user could hand the agent a command).
        """
        for directory in (self.root, self.inbox):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            found = directory.lstat()
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
                raise PermissionError(f"{directory} must be a directory of uid {os.geteuid()} with mode 0700")


def read_command_file(path: Path) -> str:
    """The command URI a claimed inbox file holds: one line of UTF-8 text, ``s3://``, at most 4 KiB.

    Raises
    ------
    BadCommandFileError
        When it is not a regular file (a symlink, a FIFO, a directory), or does not hold one such line.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadCommandFileError(f"cannot open it: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadCommandFileError("not a regular file")
        raw = os.read(fd, MAX_COMMAND_BYTES + 1)
    except OSError as exc:
        raise BadCommandFileError(f"cannot read it: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_COMMAND_BYTES:
        raise BadCommandFileError(f"longer than {MAX_COMMAND_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadCommandFileError("not UTF-8 text") from None
    uri = text.removesuffix("\n")
    if not uri.startswith("s3://") or not uri.isprintable() or " " in uri:
        raise BadCommandFileError(f"not one s3:// URI ({len(raw)} bytes)")
    return uri


def warm(services: Iterable[str] = STEP_SERVICES) -> None:
    """Import what a step imports and load botocore's data for the clients it makes, once, before any fork.

    botocore caches what it loads per :class:`botocore.loaders.Loader`, and every session makes its own; a
    step makes several sessions (the job's credentials, the instance role's), each of which would parse the
    same JSON models again. One loader is warmed here by creating each client once (with placeholder
    credentials, so nothing is resolved and nothing is sent) and then handed to every later session of this
    process and of its children: they inherit it, already loaded, through the fork. The loader holds only
    botocore's static data, never a credential or a connection.
    """
    import boto3
    import boto3.s3.transfer  # the transfers' engine, which boto3 imports lazily
    import botocore.loaders
    import botocore.session

    import spotrun.agent.step_runner  # noqa: F401  (every step's modules: `spotrun-agent run` imports them first)

    search_path = os.environ.get("AWS_DATA_PATH")
    loader = botocore.loaders.create_loader(search_path)
    session = botocore.session.Session()
    session.register_component("data_loader", loader)
    for service in services:
        session.create_client(
            service,
            region_name="us-east-1",
            aws_access_key_id="warm-up",
            aws_secret_access_key="warm-up",  # noqa: S106 (a placeholder: no request is ever sent)
        )
    share_loader(botocore.session, loader, search_path)
    del boto3


def share_loader(session_module: Any, loader: Any, search_path: str | None) -> None:
    """Make every new botocore session of this process use ``loader`` for the data path it was made for.

    ``botocore.session.Session`` builds its loader lazily with ``botocore.loaders.create_loader(data_path)``,
    imported into ``botocore.session``; a session with another data path still gets a loader of its own.
    """
    original = getattr(session_module, "create_loader", None)
    if original is None:  # another botocore: every session then loads its own, as without a resident agent
        logger.warning("botocore.session has no create_loader: sessions will not share the warmed loader")
        return

    def create_loader(search_path_string: str | None = None) -> Any:
        if search_path_string == search_path:
            return loader
        return original(search_path_string)

    session_module.create_loader = create_loader


class Resident:
    """The serving parent: claims inbox files, forks a child per command, reaps the children.

    Parameters
    ----------
    run_dir
        Its directory.
    run_step
        What a child runs with the command URI; returns the child's exit status (``spotrun-agent run``'s).
    poll_seconds
        How often the inbox is read without a wake-up.
    """

    def __init__(self, run_dir: RunDirectory, run_step: StepRunner, poll_seconds: float = POLL_SECONDS):
        self.run_dir = run_dir
        self.run_step = run_step
        self.poll_seconds = poll_seconds
        self.children: dict[int, tuple[str, float]] = {}  # pid -> (command URI, monotonic start)
        self._lock_fd: int | None = None
        self._mask: set[int | signal.Signals] = set()

    def serve(self) -> int:
        """Serve until SIGTERM or SIGINT; returns the exit status (0, or 1 when it cannot serve at all)."""
        try:
            self.run_dir.prepare()
            self._lock_fd = _lock(self.run_dir.lock_file)
        except OSError as exc:
            logger.error("the resident agent cannot serve %s: %s", self.run_dir.root, exc)
            return EXIT_NOT_SERVING
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, WAITED_SIGNALS)
        try:
            self._drop_stale_claims()
            self._write_pid_file()
            logger.info("resident agent %d serves %s", os.getpid(), self.run_dir.inbox)
            while True:
                self.reap()
                for uri in self.claim():
                    self.start(uri)
                received = signal.sigtimedwait(WAITED_SIGNALS, self.poll_seconds)
                if received is not None and received.si_signo in STOP_SIGNALS:
                    logger.info(
                        "resident agent stopping on %s; %d step(s) keep running",
                        signal.Signals(received.si_signo).name,
                        len(self.children),
                    )
                    return 0
        finally:
            self._remove_pid_file()
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            os.close(self._lock_fd)
            self._lock_fd = None

    def claim(self) -> list[str]:
        """Take every published inbox file, oldest first: the URIs of the good ones; the others are dropped.

        A file is claimed by renaming it to a dot-name (atomic: it is claimed once), read, then removed.
        """
        try:
            entries = [
                entry for entry in os.scandir(self.run_dir.inbox) if not entry.name.startswith(TEMP_PREFIX)
            ]
        except OSError as exc:
            logger.error("cannot read the inbox %s: %s", self.run_dir.inbox, exc)
            return []
        uris = []
        for entry in sorted(entries, key=_arrival):
            claimed = self.run_dir.inbox / f"{CLAIMED_PREFIX}{entry.name}"
            try:
                Path(entry.path).rename(claimed)
            except OSError:
                continue  # gone meanwhile
            try:
                uris.append(read_command_file(claimed))
            except BadCommandFileError as exc:
                # Its content is not logged: it is no command, and could be anything.
                logger.error("inbox file %s dropped, nothing runs: %s", entry.name, exc)
            finally:
                _remove(claimed)
        return uris

    def start(self, uri: str) -> int:
        """Fork the child that runs ``uri``'s step; returns its pid (the child never returns)."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:
            self._child(uri)
        self.children[pid] = (uri, time.monotonic())
        logger.info("step child %d started for %s", pid, uri)
        return pid

    def reap(self) -> None:
        """Collect every child that ended, logging its exit status (negative: the signal that ended it)."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            uri, started = self.children.pop(pid, ("?", time.monotonic()))
            logger.info(
                "step child %d for %s exited with status %d after %.1f s",
                pid,
                uri,
                os.waitstatus_to_exitcode(status),
                time.monotonic() - started,
            )

    def _child(self, uri: str) -> None:
        status = EXIT_STEP_CRASHED
        try:
            # The child owns nothing of the parent's: not its lock (a restarted parent must get it), not its
            # signal mask, not its stop handling (the step installs its own, as a fresh process would).
            if self._lock_fd is not None:
                os.close(self._lock_fd)
            for signum in WAITED_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            os.setsid()  # a session of its own, as the detached `spotrun-agent run` of the fallback
            status = self.run_step(uri)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else EXIT_STEP_CRASHED
        except BaseException:
            logger.exception("the step child for %s crashed", uri)
        finally:
            for handler in logging.getLogger().handlers:
                with contextlib.suppress(Exception):
                    handler.flush()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(status)

    def _write_pid_file(self) -> None:
        pid = os.getpid()
        temporary = self.run_dir.root / f"{TEMP_PREFIX}{AGENT_PID_FILE}.{pid}"
        temporary.write_text(f"{pid} {process_start_time(pid)}\n")
        temporary.replace(self.run_dir.pid_file)

    def _remove_pid_file(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if int(self.run_dir.pid_file.read_text().split()[0]) == os.getpid():
                self.run_dir.pid_file.unlink()

    def _drop_stale_claims(self) -> None:
        # Claimed by a parent that died before it could run or drop them: whether its child started is not
        # known, and a step must never run twice; the workflow's heartbeat timeout covers it.
        for entry in self.run_dir.inbox.iterdir():
            if entry.name.startswith(CLAIMED_PREFIX):
                logger.warning("dropping %s, claimed by an earlier resident agent", entry.name)
                _remove(entry)


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OSError(f"another resident agent holds {path}") from None
    return fd


def _arrival(entry: os.DirEntry[str]) -> tuple[int, str]:
    try:
        return entry.stat(follow_symlinks=False).st_mtime_ns, entry.name
    except OSError:
        return 0, entry.name


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def serve(run_dir: RunDirectory, run_step: StepRunner, poll_seconds: float = POLL_SECONDS) -> int:
    """Warm the agent, then serve ``run_dir`` with :class:`Resident`; returns the exit status."""
    started = time.monotonic()
    warm()
    logger.info("resident agent warmed in %.2f s", time.monotonic() - started)
    return Resident(run_dir, run_step, poll_seconds).serve()
