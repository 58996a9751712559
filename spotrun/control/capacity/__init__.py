"""A job's instances: acquire one (``acquire``, or a standby launched early: ``standby``), wait until it is
ready (``readiness``), act on its loss (``interruptions``), move a deadline job between spot and on-demand
(``deadline_moves``, ``spot_return``), and release every instance it ever had (``release``).
"""
