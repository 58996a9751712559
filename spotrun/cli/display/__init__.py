"""How the CLI shows things to people: its consoles and ``--json`` answers (``output``), a job's live line and
final summary (``summary``), and ``spotrun simulate --plot`` (``simulate_plot``).
"""
