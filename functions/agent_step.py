"""Lambda: send a step (stage, train) to the agent on the job's instance; the task token stays in the job record."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from functions.runtime import Ports, function_handler, logger
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.model.agent_protocol.command import StageResult, WorkflowStep
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now
from spotrun.model.timing import WorkflowTiming


class AgentStepRequest(DeferredModel):
    job_id: str
    step: WorkflowStep
    task_token: str = Field(repr=False)
    timing: WorkflowTiming
    staged: StageResult | None = None


@function_handler(AgentStepRequest)
def handler(request: AgentStepRequest, aws: Ports) -> dict[str, Any]:
    command_id = dispatch_agent_step(
        job_id=request.job_id,
        step=request.step,
        task_token=request.task_token,
        timing=request.timing,
        staged=request.staged,
        store=aws.store,
        objects=aws.objects,
        commands=aws.commands,
        settings=aws.settings,
        now=utc_now(),
    )
    # Never log the event itself: it carries the task token.
    logger.info(
        "agent step sent", extra={"job_id": request.job_id, "step": request.step, "command": command_id}
    )
    return {"command_id": command_id}
