"""Scheduled retraining: schedules made from a manifest's ``schedule`` and what one firing does (``firing``),
the records of firings (``run_records``), and a schedule as the API shows it (``view``).
"""
