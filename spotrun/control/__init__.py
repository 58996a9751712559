"""The control plane's use cases: plain functions over the ports of ``ports`` (no boto3 here), one per thing
the workflow or the API does. ``capacity`` acquires and releases instances and acts on interruptions,
``schedules`` makes and fires schedules, ``views`` is what the REST API reads; the modules beside them submit,
dispatch, record reports, archive and finalize a job, and change its record safely (``store``).
"""
