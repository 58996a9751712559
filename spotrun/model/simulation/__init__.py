"""Replaying spot traces (``traces``) for one job under each deadline policy (``replay``), against the
omniscient optimum (``optimum``), from many start times (``runs``): what ``spotrun simulate`` and the bench show.
"""
