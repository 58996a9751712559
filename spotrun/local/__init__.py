"""The embedded runtime: the deployment on one machine, on moto, with simulated spot GPU instances.

Import :class:`LocalRuntime` from here; nothing in this package touches moto, the environment or the network
at import time.
"""

from spotrun.local.capacity import CapacityModel, Pool, default_pools
from spotrun.local.runtime import LocalRuntime

__all__ = ["CapacityModel", "LocalRuntime", "Pool", "default_pools"]
