"""boto3 adapters of the control plane's ports (``adapters``, ``job_store``, ``objects``, ``schedules``), the AWS
events spotrun consumes as models (``events``), and the runtime settings read from the environment at call
time (``settings``).
"""
