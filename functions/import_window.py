"""The cold start's import window: the cyclic garbage collector paused while a function's modules load.

Importing a handler allocates a few hundred thousand objects (modules, classes, functions, the models' field
definitions) that live as long as the execution environment. CPython's collector runs a young-generation pass
every 700 net allocations and promotes what survives (https://docs.python.org/3/library/gc.html,
``gc.set_threshold``; "Garbage collector design" in the CPython developer guide): during an import nearly all of
it survives, so those passes, and the older-generation passes they trigger, scan the same long-lived objects
again and again and free nothing. Net of the closing collection below, pausing them saves about 20-30 M of the
~1.3 G instructions of a handler's import in the Lambda layer's virtualenv (docs/cold-start.md).

:func:`collection_paused` runs the imports with the collector off and ends with one full collection, inside the
window: what the import left unreachable is freed there, and every survivor is in the oldest generation, where
it would have been promoted anyway. So nothing is left for the first invocation to pay, and the collector's
state afterwards is the one it had before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector paused, then collect once and restore it.

    A no-op when the collector is already off (the caller's choice stands, and nothing is collected). When the
    block raises, the collector is restored without a collection.

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
        # One full pass in the window: the garbage the imports made is freed now, not in the first invocation.
        gc.collect()
    finally:
        gc.enable()
