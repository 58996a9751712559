"""The job record (``record.Job``: the one place where status changes are allowed) and what it holds: its
attempts and how each ended (``attempt``, ``attempt_end``), standby instances, the deadline policy's entries
(``deadline_record``), its limits (budget, runtime), its id (``ids``), the interruption rate its attempts show,
and the events published when its status changes (``bus_events``).
"""
