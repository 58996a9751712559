"""The embedded runtime: the deployment on one machine, on moto, with simulated spot GPU instances.

Import :class:`LocalRuntime` (and :class:`Pool`, to declare its spot pools) from here; nothing in this package
touches moto, the environment or the network at import time.
"""

from spotrun.local.capacity.catalog import Pool
from spotrun.local.runtime import LocalRuntime

__all__ = ["LocalRuntime", "Pool"]
