"""Step Functions: keep the ``cause`` of ``SendTaskFailure``, and refuse a task result past 256 KiB.

moto's response layer passes only ``error`` on to the backend, so a failure reported by the agent would reach
the workflow without its cause (exit code, log tail, checkpoint). The replacement passes both, as AWS does.

AWS limits what a task may hand back. The Step Functions quotas ("Maximum input or output size for a task,
state, or execution": 256 KiB of data as a UTF-8 encoded string; an oversize state result fails the execution
with ``States.DataLimitExceeded``, https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html) and
the ``SendTaskSuccess`` API reference (``output``: maximum length 262144, counted as UTF-8 bytes,
https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html) say so. moto's ASL
interpreter already fails a state or Lambda result past that size with ``States.DataLimitExceeded``
(``moto.stepfunctions.parser.quotas``), but its ``SendTaskSuccess`` takes any output. The replacement refuses
an output over the limit with ``ValidationException`` (HTTP 400), as AWS's request validation does (Common
Errors: "The input fails to satisfy the constraints specified by an AWS service",
https://docs.aws.amazon.com/step-functions/latest/apireference/CommonErrors.html), so an agent that reports too
much fails in the emulator exactly where it would on AWS.
"""

from __future__ import annotations

from typing import Any

from spotrun.local.patches.reversible import PatchSet

# SendTaskSuccess ``output``, a state's input and output, a task's result: 256 KiB of UTF-8.
MAX_PAYLOAD_BYTES = 256 * 1024


def payload_too_large(text: str | None) -> bool:
    """Whether ``text`` passes Step Functions' 256 KiB payload quota, counted in UTF-8 bytes."""
    return text is not None and len(text.encode("utf-8")) > MAX_PAYLOAD_BYTES


def install(patches: PatchSet) -> None:
    """Replace ``send_task_failure`` and ``send_task_success`` of moto's response layer until undone."""
    from moto.core.responses import EmptyResult
    from moto.stepfunctions.exceptions import ValidationException
    from moto.stepfunctions.responses import StepFunctionResponse

    def send_task_failure(self: Any) -> Any:
        self.stepfunction_backend.send_task_failure(
            self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
        )
        return EmptyResult()

    def send_task_success(self: Any) -> Any:
        output = self._get_param("output")
        if payload_too_large(output):
            raise ValidationException(
                "1 validation error detected: Value at 'output' failed to satisfy constraint: Member must "
                f"have length less than or equal to {MAX_PAYLOAD_BYTES}"
            )
        self.stepfunction_backend.send_task_success(self._get_param("taskToken"), output)
        return EmptyResult()

    patches.add(StepFunctionResponse, "send_task_failure", send_task_failure)
    patches.add(StepFunctionResponse, "send_task_success", send_task_success)
