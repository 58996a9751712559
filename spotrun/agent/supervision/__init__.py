"""Watching the training command while it runs: the ``supervisor`` (restarts, limits, abandonment), its
environment (``command_environment``), spot notices from IMDS (``spot_notices``) or relayed by another agent
process (``notice_relay``), progress and the auto interval (``progress``, ``interval``), checkpoint upload as
they appear (``checkpoint_sync``), the live log (``log_shipper``, ``log_notes``) and GPU metrics (``gpu``).
"""
