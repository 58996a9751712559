"""The serverless control plane: the Lambda functions (``functions``) and their code assets (``bundling``), the
job state machine (``workflow``), the EventBridge rules (``events``), the schedule group (``schedules``) and the
REST API (``api``).
"""
