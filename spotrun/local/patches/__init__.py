"""Where the emulator changes moto, each reversibly (``reversible.PatchSet``): EC2 with capacity and eventual
consistency, EventBridge delivery, Lambda without Docker, S3's events, ranges and integrity checks, Step
Functions' limits, SSM Run Command to simulated instances, and request dispatch.
"""
