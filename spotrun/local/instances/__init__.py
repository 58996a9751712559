"""The emulator's simulated EC2 instances: their life cycle (``fleet``), one instance (``instance``: a directory
for its disk, an IMDS, real processes), its metadata service (``imds``), and its agent: the programs
(``agent_programs``), their environment (``agent_environment``) and SSM's deliveries to them (``ssm_delivery``).
"""
