"""What Linux's ``execve(2)`` takes: the sizes a command and its environment must fit to start at all.

A command the kernel refuses never runs: the agent would see ``E2BIG`` ("Argument list too long") after an
instance was bought, staged and set up. The manifest is refused instead, when it is submitted, by these rules
(https://man7.org/linux/man-pages/man2/execve.2.html, "Limits on size of arguments and environment"):

- **One string** (an argument, or an environment entry ``NAME=value``) may hold at most ``MAX_ARG_STRLEN``
  bytes *including* its terminating NUL: 32 pages, 131,072 bytes with the 4 KiB pages of x86-64 and of the
  arm64 kernels EC2 boots. So at most 131,071 bytes of UTF-8.
- **All of them together** (argv and environment, each string with its NUL and a pointer to it) may hold at
  most a quarter of the stack's soft limit: 2 MiB under Linux's default 8 MiB stack (``ulimit -s``), which
  spotrun's instances keep (an AMI with a smaller one would lower it). spotrun checks the part the manifest
  decides (the command after ``${NAME}`` expansion, and ``training.env``) against 2 MiB less
  :data:`AGENT_ENVIRONMENT_RESERVE`, room for what the agent adds on the instance: the ``SPOTRUN_*``
  contract, the instance's own variables and the secrets' values, which are unknown at submission.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "AGENT_ENVIRONMENT_RESERVE",
    "ARG_MAX_TOTAL",
    "MAX_ARG_STRLEN",
    "POINTER_BYTES",
    "environment_problem",
    "exec_size",
    "string_problem",
]

MAX_ARG_STRLEN: Final = 32 * 4096  # bytes of one argv or envp string, its NUL included (execve(2))
ARG_MAX_TOTAL: Final = 8 * 1024 * 1024 // 4  # a quarter of the default 8 MiB stack limit (execve(2))
POINTER_BYTES: Final = 8  # each string's pointer in argv[] / envp[] counts too, on a 64-bit kernel
# Room left for the environment the agent gives the command besides training.env: the SPOTRUN_ contract (a
# dozen paths), the instance's variables (PATH, HOME...) and the secrets' values (one Secrets Manager value may
# reach 64 KiB).
AGENT_ENVIRONMENT_RESERVE: Final = 256 * 1024


def _size(text: str) -> int:
    """Bytes the kernel copies for one string: its UTF-8 and the NUL after it."""
    return len(text.encode("utf-8", "surrogatepass")) + 1


def string_problem(where: str, text: str) -> str | None:
    """Why the kernel would refuse the string ``text`` (an argument or ``NAME=value``), or None.

    Parameters
    ----------
    where
        How the error names the string, e.g. ``command[1]``.
    text
        The string as the command receives it.
    """
    size = _size(text)
    if size <= MAX_ARG_STRLEN:
        return None
    return (
        f"{where}: {size - 1:,} bytes; Linux starts no command with a single argument or environment string "
        f"over {MAX_ARG_STRLEN - 1:,} bytes (MAX_ARG_STRLEN, execve(2): 'Argument list too long'). "
        "Put large data in a file (in training.code or the inputs) and pass its path"
    )


def environment_problem(env: Mapping[str, str]) -> str | None:
    """Why the kernel would refuse one of the entries ``NAME=value`` of ``env``, or None."""
    for name, value in env.items():
        problem = string_problem(name, f"{name}={value}")
        if problem is not None:
            return problem
    return None


def exec_size(argv: Iterable[str], env: Mapping[str, str]) -> int:
    """Bytes ``execve`` counts against :data:`ARG_MAX_TOTAL` for ``argv`` and ``env``: strings, NULs, pointers."""
    strings = [*argv, *(f"{name}={value}" for name, value in env.items())]
    return sum(_size(text) + POINTER_BYTES for text in strings)
