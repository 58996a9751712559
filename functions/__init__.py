"""The Lambda functions: one module per function of :data:`spotrun.shape.SHAPE`, each its request model and one
call into a use case of :mod:`spotrun.control`, made an entry point by :func:`functions.runtime.function_handler`
(Powertools' logger, tracer and metrics, the event parsed, the function's ports). The REST API is ``api``.
"""
