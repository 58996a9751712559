"""The events spotrun puts on its own EventBridge bus: their source, detail-types and details.

One home for the producer (the job store, the API's agent route), the consumer's rule (:data:`spotrun.shape.SHAPE`)
and its handler. The bus is the deployment's, open to the user's own rules: a status change is for them; a
return to spot is the control plane's own request, which the user's rules may see and should ignore.
"""

from __future__ import annotations

from typing import Final, Literal

from spotrun.model.base import DeferredModel

Source = Literal["spotrun"]
SOURCE: Final[Source] = "spotrun"
STATUS_CHANGE = "Spotrun Job Status Change"
ReturnToSpotName = Literal["Spotrun Deadline Return To Spot"]  # the type its handler's model checks
RETURN_TO_SPOT: Final[ReturnToSpotName] = "Spotrun Deadline Return To Spot"


class ReturnToSpot(DeferredModel):
    """A request to move a deadline job from on-demand back to spot (:mod:`spotrun.control.capacity.deadline_moves`).

    The API's agent route, which hears the job's heartbeats, asks; the ``deadline_return`` function, which may
    launch instances, acts: it asks EC2 for spot and moves the job only once spot is had.
    """

    job_id: str
    attempt: int  # the on-demand attempt to move: a request outlived by its attempt does nothing
