"""The pure model: pydantic models and plain functions, no AWS SDK. Every decision spotrun takes lives here.

``manifest`` is the user's contract, ``capacity`` where instances come from and what they cost, ``job`` the
job record and its attempts, ``deadline`` the policy that meets a deadline at the lowest cost, ``simulation``
its replay over spot traces, ``agent_protocol`` what the control plane and the instance agent exchange. The
modules beside them are shared by all: ``layout`` (keys, tags, directories), ``timing``, ``errors``,
``deferred`` (the models' base), ``contract_variables`` and ``checkpoint_interval``.
"""
