"""The workflow's steps as the agent runs them: ``stage`` (inputs, code, the latest checkpoint onto the NVMe;
then ``setup``) and ``train`` (the user's command under the checkpoint contract), with the parts they use:
``code_archive``, ``final_outputs`` (the finished job's outputs and log) and ``digest`` (the model's SHA-256).
"""
