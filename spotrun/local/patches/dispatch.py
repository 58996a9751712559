"""moto's request dispatch without a directory listing per request.

moto 5.2.5's server picks a backend for each request in ``DomainDispatcherApplication.get_backend_for_host``,
which first tests ``host in backends.list_of_moto_modules()``: a generator that lists moto's package directory
and stats every entry (about 150 ``isdir`` calls) on every request, the emulator's own and every agent's. The
listing cannot change while the process runs, so the replacement returns the same names, listed once. A cost
of the emulator, not of AWS: nothing the control plane sees changes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from spotrun.local.patches.reversible import PatchSet


def install(patches: PatchSet) -> None:
    """Replace ``moto.backends.list_of_moto_modules`` with a listing made once, until undone."""
    from moto import backends

    original = backends.list_of_moto_modules
    listed = functools.cache(lambda: tuple(original()))

    def list_of_moto_modules() -> Iterable[str]:
        return listed()

    patches.add(backends, "list_of_moto_modules", list_of_moto_modules)
