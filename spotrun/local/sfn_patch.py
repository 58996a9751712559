"""Step Functions: keep the ``cause`` of ``SendTaskFailure``.

moto's response layer passes only ``error`` on to the backend, so a failure reported by the agent would reach
the workflow without its cause (exit code, log tail, checkpoint). The replacement passes both, as AWS does.
"""

from __future__ import annotations

from typing import Any

from spotrun.local.patches import PatchSet


def install(patches: PatchSet) -> None:
    """Replace ``StepFunctionResponse.send_task_failure`` until the patch set is undone."""
    from moto.core.responses import EmptyResult
    from moto.stepfunctions.responses import StepFunctionResponse

    def send_task_failure(self: Any) -> Any:
        self.stepfunction_backend.send_task_failure(
            self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
        )
        return EmptyResult()

    patches.add(StepFunctionResponse, "send_task_failure", send_task_failure)
