"""The embedded runtime: the deployment on one machine, on moto, with simulated spot GPU instances.

:class:`~spotrun.local.runtime.LocalRuntime` runs it (its spot pools declared as
:class:`~spotrun.local.capacity.catalog.Pool`); ``up`` serves it as a long-running local AWS with a chaos control
API (``control_api``), ``demo`` runs the example job through it. ``patches`` holds every change to moto,
``iam`` judges each request as IAM would, ``instances`` and ``capacity`` simulate EC2, ``chaos`` injects
failures. Nothing in this package touches moto, the environment or the network at import time.
"""
