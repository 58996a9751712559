"""A schedule as the API shows it, apart from :mod:`spotrun.control.schedules.firing`, which makes and fires schedules.

The API's schedule routes name :class:`ScheduleView` in their answers (Powertools reads the routes' annotations
from their module to validate the answers), so the users' API imports this module at its cold start, and the
schedules' use cases, which submit jobs, at the first request of a schedule route only (docs/development/cold-start.md).
"""

from __future__ import annotations

from datetime import datetime

from spotrun.model.base import DeferredModel


class ScheduleView(DeferredModel):
    """A schedule as the API shows it."""

    name: str
    expression: str
    timezone: str
    state: str = "ENABLED"
    next_run: datetime | None = None  # computed for cron, and for a rate at creation
