"""The REST API behind API Gateway's IAM auth: the users' routes (``app``: jobs, plans, schedules, code uploads)
and the instances' (``agent_app``: step reports and a job's credentials), two functions sharing the refusals
before routing (``gate``) and one OpenAPI document (``openapi``, written to ``openapi.json``).
"""
