"""The spotrun agent: runs on the GPU instance, one step of one attempt at a time.

``spotrun-agent run --command-uri s3://<jobs bucket>/<key>`` (or ``python -m spotrun.agent run ...``) reads an
:class:`~spotrun.model.agent_protocol.command.AgentCommand` from S3 and runs its step:

- ``stage`` (:mod:`spotrun.agent.steps.stage`): copy the inputs and the code to the NVMe, verified, and restore the
  job's latest committed checkpoint;
- ``train`` (:mod:`spotrun.agent.steps.train`): run the training command under the checkpoint contract, upload its
  checkpoints and the step it reached (:mod:`spotrun.agent.supervision.progress`) as they appear, publish GPU metrics
  (:mod:`spotrun.agent.supervision.gpu`), watch IMDS for a spot notice, and upload the outputs when it succeeds.

Both ship the attempt's log to CloudWatch Logs as it is written (:mod:`spotrun.agent.supervision.log_shipper`): setup's
output, then the command's; the S3 copy is uploaded when each ends.

Either way it heartbeats while it works and reports the step's result once, to the API's agent route, signed
with the instance's own role credentials; the control plane answers the workflow (:mod:`spotrun.agent.reporter`).

- ``notice`` (:mod:`spotrun.agent.supervision.notice_relay`): hand a spot notice, sent through SSM, to the
running ``train`` step
  of the same job and attempt, and exit; nothing is reported (the train step reports ``Spot.Interrupted``).
"""
