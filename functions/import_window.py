"""The cold start's import window: the cyclic garbage collector paused while a function's modules load.

Importing a handler allocates a few hundred thousand objects (modules, classes, functions, the models' field
definitions) that live as long as the execution environment. CPython's collector runs a young-generation pass
every 700 net allocations and promotes what survives (https://docs.python.org/3/library/gc.html,
``gc.set_threshold``; "Garbage collector design" in the CPython developer guide): during an import nearly all of
it survives, so those passes, and the older-generation passes they trigger, scan the same long-lived objects
again and again and free nothing.

:func:`collection_paused` runs the imports with the collector off and ends by freezing what exists
(``gc.freeze``: every object the collector tracks moves to a permanent generation, which no later collection
scans; https://docs.python.org/3/library/gc.html#gc.freeze). An execution environment keeps its modules for its
whole life, so nothing is lost by never scanning them again, and the young generation starts the first
invocation empty: nothing is left for it to pay. The garbage the imports made stays frozen with the rest, a few
hundred objects (823 for ``functions.acquire``), where a closing full collection to free it took about 36 ms,
a sixth of the import (docs/development/cold-start.md).

On AWS an execution environment is one process, imported once. The emulator imports the functions afresh for
each environment it creates, in one process, and unfreezes after each import
(:func:`spotrun.local.patches.lambda_invoke.fresh_handler`), so an environment it discards is collected as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector paused, then freeze what exists and restore it.

    A no-op when the collector is already off (the caller's choice stands, and nothing is frozen). When the
    block raises, the collector is restored and nothing is frozen.

    Yields
    ------
    None
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
        # What the imports made lives as long as the environment: never scanned again, by this or any later pass.
        gc.freeze()
    finally:
        gc.enable()
