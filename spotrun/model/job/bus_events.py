"""The events spotrun puts on its own EventBridge bus: their source, detail-types and details.

One home for the producer (the job store, the API's agent route), the consumer's rule (:data:`spotrun.shape.SHAPE`)
and its handler. The bus is the deployment's, open to the user's own rules: a status change and a deadline
decision are for them (and for the notifications of :mod:`spotrun.notifications`); a return to spot is the control
plane's own request, which the user's rules may see and should ignore.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from spotrun.model.base import DeferredModel

Source = Literal["spotrun"]
SOURCE: Final[Source] = "spotrun"
STATUS_CHANGE = "Spotrun Job Status Change"
# A deadline job's policy chose another way to run it (spot, on-demand, wait) than its decision before.
DEADLINE_DECISION = "Spotrun Job Deadline Decision"
ReturnToSpotName = Literal["Spotrun Deadline Return To Spot"]  # the type its handler's model checks
RETURN_TO_SPOT: Final[ReturnToSpotName] = "Spotrun Deadline Return To Spot"

# The longest headline an event carries; Slack shows about this much of a message without "show more".
HEADLINE_LIMIT = 300
# What a headline keeps of the text it is built from: EventBridge's input transformer does not escape the values
# it places in a template (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html,
# "Common issues with transforming input"), so a quote, a backslash or a control character in a job's name or
# error would break the JSON body of a webhook. A headline never holds one.
_UNSAFE = re.compile(r'["\\\x00-\x1f\x7f<>]')


def safe_text(text: str) -> str:
    """``text`` with every character an input template cannot carry replaced by a space, shortened to fit.

    Parameters
    ----------
    text
        Any text (a job's name, an error type).

    Returns
    -------
    str
        At most :data:`HEADLINE_LIMIT` characters, none of ``"``, ``\\``, ``<``, ``>`` or a control character.
    """
    cleaned = " ".join(_UNSAFE.sub(" ", text).split())
    return cleaned if len(cleaned) <= HEADLINE_LIMIT else cleaned[: HEADLINE_LIMIT - 3] + "..."


class ReturnToSpot(DeferredModel):
    """A request to move a deadline job from on-demand back to spot (:mod:`spotrun.control.capacity.deadline_moves`).

    The API's agent route, which hears the job's heartbeats, asks; the ``deadline_return`` function, which may
    launch instances, acts: it asks EC2 for spot and moves the job only once spot is had.
    """

    job_id: str
    attempt: int  # the on-demand attempt to move: a request outlived by its attempt does nothing
