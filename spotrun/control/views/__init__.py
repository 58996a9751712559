"""What the REST API reads: jobs listed, shown and cancelled (``jobs``), the job as JSON (``job_json``), its
artifacts (``artifacts``: logs, restored models), its telemetry (``telemetry``: metrics and GPU readings), and the
plan before paying (``plan``, its answer: ``plan_model``).
"""
