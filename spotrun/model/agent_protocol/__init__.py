"""What the control plane and the instance agent exchange: the command of a step and the agent's report
(``command``), the SSM document that starts the agent (``ssm_document``), the API routes it calls
(``api_paths``), the checkpoints it commits (``checkpoints``), and the session policy of its job's credentials
(``session_policy``).
"""
