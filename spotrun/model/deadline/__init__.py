"""Finish by a deadline at the lowest cost: the job's live state and slack (``state``), the policies that
choose spot, on-demand or wait (``policies``), their inputs (``inputs``, ``work``), and the policy applied to a
stored job (``stored_job``).
"""
